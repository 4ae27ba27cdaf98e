(** Proofs for [Rankrounds]: what a rank's [rank_rounds] holds, and that
    the round of a cut depends only on its pair's cuts, so the two ranks
    of a pair, each numbering its own cuts, agree. *)
From Coq Require Import List Arith Bool Permutation Lia.
From Coq Require Import SetoidList.
From VS Require Import Prelude Rankrounds.
Import ListNotations.

Section Proofs.
Context {A : Type}.
Notation cut := (A * nat * nat * nat)%type.

(** The chunk of each cut by its pair's cuts before it and itself. *)
Fixpoint cspec (budget : nat) (pre l : list cut) : list (nat * cut) :=
  match l with
  | [] => []
  | x :: l' => (fst (runs budget (filter (onpair (csrc x) (cdst x)) (pre ++ [x]))), x)
               :: cspec budget (pre ++ [x]) l'
  end.

Lemma runs_snoc : forall budget (l : list cut) (x : cut),
  runs budget (l ++ [x]) = step budget (runs budget l) (cbytes x).
Proof. intros. unfold runs. rewrite fold_left_app. reflexivity. Qed.

Lemma onpair_key : forall m a b (x : cut), b < m -> cdst x < m ->
  (csrc x * m + cdst x =? a * m + b) = onpair a b x.
Proof.
  intros m a b x Hb Hx. unfold onpair.
  destruct (Nat.eqb_spec (csrc x * m + cdst x) (a * m + b)) as [E|E].
  - destruct (Nat.div_mod_unique m (csrc x) a (cdst x) b Hx Hb) as [E1 E2]; [lia|].
    rewrite E1, E2, !Nat.eqb_refl. reflexivity.
  - destruct (Nat.eqb_spec (csrc x) a); destruct (Nat.eqb_spec (cdst x) b); simpl; auto.
Qed.

Lemma onpair_self : forall x : cut, onpair (csrc x) (cdst x) x = true.
Proof. intros. unfold onpair. rewrite !Nat.eqb_refl. reflexivity. Qed.

Lemma chunks_spec : forall m budget (l pre : list cut) M,
  (forall a b, b < m -> find_or (0, 0) (a * m + b) M = runs budget (filter (onpair a b) pre)) ->
  (forall x, In x l -> cdst x < m) ->
  chunks m budget M l = cspec budget pre l.
Proof.
  intros m budget l. induction l as [|x l IH]; intros pre M HM Hl; simpl; [reflexivity|].
  assert (Hx : cdst x < m) by (apply Hl; left; reflexivity).
  rewrite HM by exact Hx.
  rewrite filter_app. simpl. rewrite onpair_self.
  rewrite runs_snoc. f_equal.
  apply IH; [|intros; apply Hl; right; assumption].
  intros a b Hb. rewrite find_or_add, onpair_key by assumption.
  rewrite filter_app. simpl. destruct (onpair a b x) eqn:E.
  - unfold onpair in E. apply andb_prop in E as [E1 E2].
    apply Nat.eqb_eq in E1, E2. subst. rewrite runs_snoc. reflexivity.
  - rewrite app_nil_r. apply HM. exact Hb.
Qed.

Lemma filter_idem : forall (f : cut -> bool) l, filter f (filter f l) = filter f l.
Proof.
  intros f l. induction l as [|x l IH]; simpl; auto.
  destruct (f x) eqn:E; simpl; rewrite ?E, IH; reflexivity.
Qed.

Lemma filter_comm : forall (f g : cut -> bool) l, filter f (filter g l) = filter g (filter f l).
Proof.
  intros f g l. induction l as [|x l IH]; simpl; auto.
  destruct (g x) eqn:G; destruct (f x) eqn:F; simpl; rewrite ?G, ?F, IH; reflexivity.
Qed.

(** The chunks of a pair's cuts are those of the pair's cuts alone. *)
Lemma cspec_pair : forall budget a b (l pre : list cut),
  filter (fun p => onpair a b (snd p)) (cspec budget pre l)
  = cspec budget (filter (onpair a b) pre) (filter (onpair a b) l).
Proof.
  intros budget a b l. induction l as [|x l IH]; intros pre; simpl; [reflexivity|].
  destruct (onpair a b x) eqn:E; simpl.
  - rewrite IH, !filter_app. simpl. rewrite E, onpair_self.
    unfold onpair in E. apply andb_prop in E as [E1 E2]. apply Nat.eqb_eq in E1, E2.
    rewrite E1, E2, filter_idem. reflexivity.
  - rewrite IH, filter_app. simpl. rewrite E, app_nil_r. reflexivity.
Qed.

Lemma cspec_snd : forall budget (l pre : list cut), map snd (cspec budget pre l) = l.
Proof. intros budget l. induction l; intros; simpl; f_equal; auto. Qed.

Lemma maxdst_bound : forall (l : list cut) x, In x l -> cdst x < S (maxdst l).
Proof.
  intros l. induction l as [|y l IH]; intros x H; simpl in *; [contradiction|].
  destruct H as [<-|H]; [lia|]. specialize (IH x H). lia.
Qed.

(** The round number of each moving cut, from its pair's cuts up to it. *)
Definition nspec (world budget : nat) (l : list cut) : list (nat * cut) :=
  map (fun kx => (rid (width world) (fst kx) (csrc (snd kx)) (cdst (snd kx)), snd kx))
      (cspec budget [] (moving l)).

Lemma numbered_spec : forall world budget (l : list cut), numbered world budget l = nspec world budget l.
Proof.
  intros. unfold numbered, nspec. f_equal. apply chunks_spec.
  - intros a b _. rewrite find_or_empty. reflexivity.
  - intros x H. apply maxdst_bound. exact H.
Qed.

Lemma numbered_snd : forall world budget (l : list cut), map snd (numbered world budget l) = moving l.
Proof.
  intros. rewrite numbered_spec. unfold nspec. rewrite map_map. simpl. apply cspec_snd.
Qed.

Lemma filter_map_swap : forall {B C} (f : C -> bool) (g : B -> C) (l : list B),
  filter f (map g l) = map g (filter (fun x => f (g x)) l).
Proof. intros. induction l as [|x l IH]; simpl; auto. destruct (f (g x)); simpl; rewrite IH; reflexivity. Qed.

(** Both sides agree: the numbered cuts of a pair depend only on that pair's cuts. *)
Theorem numbered_agree : forall world budget a b (l1 l2 : list cut),
  filter (onpair a b) l1 = filter (onpair a b) l2 ->
  filter (fun p => onpair a b (snd p)) (numbered world budget l1)
  = filter (fun p => onpair a b (snd p)) (numbered world budget l2).
Proof.
  intros world budget a b l1 l2 H. rewrite !numbered_spec. unfold nspec.
  rewrite !filter_map_swap. simpl.
  assert (K : forall l, filter (fun x => onpair a b (snd x)) (cspec budget [] (moving l))
                        = cspec budget [] (moving (filter (onpair a b) l))).
  { intros l. rewrite cspec_pair. simpl. unfold moving. rewrite filter_comm. reflexivity. }
  rewrite !K, H. reflexivity.
Qed.

(** Bucketing: the cuts of round [t], reversed, ahead of what [M] held. *)
Lemma bucket_spec : forall (l : list (nat * cut)) M t,
  find_or [] t (bucket M l) = rev (map snd (filter (fun p => fst p =? t) l)) ++ find_or [] t M.
Proof.
  intros l. induction l as [|[t0 x] l IH]; intros M t; simpl; [reflexivity|].
  rewrite IH, find_or_add. destruct (Nat.eqb_spec t0 t) as [E|E]; simpl.
  - subst. rewrite <- app_assoc. reflexivity.
  - reflexivity.
Qed.

Lemma rank_rounds_in : forall world budget (l : list cut) t xs,
  In (t, xs) (rank_rounds world budget l) ->
  exists ys, xs = rev ys /\ NatMap.find t (bucket (NatMap.empty _) (numbered world budget l)) = Some ys.
Proof.
  intros world budget l t xs H. unfold rank_rounds in H. apply in_map_iff in H as [[t' ys] [E H]].
  simpl in E. injection E as <- <-. exists ys. split; [reflexivity|].
  apply NatMapFacts.find_mapsto_iff. apply NatMapFacts.elements_mapsto_iff.
  apply InA_alt. exists (t', ys). split; [split; reflexivity|exact H].
Qed.

(** Round [t] of a rank holds exactly its cuts numbered [t], in the order given. *)
Theorem rank_rounds_round : forall world budget (l : list cut) t xs,
  In (t, xs) (rank_rounds world budget l) ->
  xs = map snd (filter (fun p => fst p =? t) (numbered world budget l)).
Proof.
  intros world budget l t xs H. destruct (rank_rounds_in _ _ _ _ _ H) as [ys [-> F]].
  assert (G := bucket_spec (numbered world budget l) (NatMap.empty _) t).
  unfold find_or in G. rewrite F, NatMapFacts.empty_o, app_nil_r in G. subst ys.
  apply rev_involutive.
Qed.

(** Every moving cut is in the round of its number. *)
Lemma rank_rounds_cover : forall world budget (l : list cut) t x,
  In (t, x) (numbered world budget l) ->
  exists xs, In (t, xs) (rank_rounds world budget l) /\ In x xs.
Proof.
  intros world budget l t x H.
  assert (G := bucket_spec (numbered world budget l) (NatMap.empty _) t).
  rewrite find_or_empty, app_nil_r in G. unfold find_or in G.
  assert (Hin : In x (rev (map snd (filter (fun p => fst p =? t) (numbered world budget l))))).
  { apply in_rev. rewrite rev_involutive. apply in_map_iff. exists (t, x). split; [reflexivity|].
    apply filter_In. split; [exact H|apply Nat.eqb_refl]. }
  destruct (NatMap.find t (bucket (NatMap.empty _) (numbered world budget l))) as [ys|] eqn:F.
  - subst ys. exists (map snd (filter (fun p => fst p =? t) (numbered world budget l))). split.
    + unfold rank_rounds. apply in_map_iff.
      apply NatMapFacts.find_mapsto_iff, NatMapFacts.elements_mapsto_iff, InA_alt in F.
      destruct F as [[t' ys] [[E1 E2] Hy]]. simpl in E1, E2.
      exists (t', ys). split; [|exact Hy]. simpl. rewrite <- E1, <- E2, rev_involutive. reflexivity.
    + apply in_rev. exact Hin.
  - rewrite <- G in Hin. contradiction.
Qed.

Lemma in_rounds_numbered : forall world budget (l : list cut) t xs x,
  In (t, xs) (rank_rounds world budget l) -> In x xs -> In (t, x) (numbered world budget l).
Proof.
  intros world budget l t xs x H Hx. rewrite (rank_rounds_round _ _ _ _ _ H) in Hx.
  apply in_map_iff in Hx as [[t' y] [E Hy]]. simpl in E. subst y.
  apply filter_In in Hy as [Hy Et]. simpl in Et. apply Nat.eqb_eq in Et. subst. exact Hy.
Qed.

(** Both sides of every cut in the same round: two ranks' cut lists with
    the same cuts of the pair [a -> b] in the same order place each such
    cut in the same round, and within every round the pair's cuts are the
    same, in the same order. *)
Theorem rank_rounds_agree : forall world budget a b (l1 l2 : list cut),
  filter (onpair a b) l1 = filter (onpair a b) l2 ->
  (forall t xs x, In (t, xs) (rank_rounds world budget l1) -> In x xs -> onpair a b x = true ->
     exists ys, In (t, ys) (rank_rounds world budget l2) /\ In x ys) /\
  (forall t xs ys, In (t, xs) (rank_rounds world budget l1) -> In (t, ys) (rank_rounds world budget l2) ->
     filter (onpair a b) xs = filter (onpair a b) ys).
Proof.
  intros world budget a b l1 l2 H. assert (N := numbered_agree world budget a b l1 l2 H). split.
  - intros t xs x Hr Hx P. apply rank_rounds_cover.
    assert (I : In (t, x) (filter (fun p => onpair a b (snd p)) (numbered world budget l1))).
    { apply filter_In. split; [exact (in_rounds_numbered _ _ _ _ _ _ Hr Hx)|exact P]. }
    rewrite N in I. apply filter_In in I as [I _]. exact I.
  - intros t xs ys H1 H2. rewrite (rank_rounds_round _ _ _ _ _ H1), (rank_rounds_round _ _ _ _ _ H2).
    assert (K : forall l : list (nat * cut), filter (onpair a b) (map snd (filter (fun p => fst p =? t) l))
               = map snd (filter (fun p => fst p =? t) (filter (fun p => onpair a b (snd p)) l))).
    { intros l. induction l as [|[t' x] l IH]; simpl; auto.
      destruct (t' =? t) eqn:T; destruct (onpair a b x) eqn:P; simpl; rewrite ?T, ?P, ?IH; reflexivity. }
    rewrite !K, N. reflexivity.
Qed.

Lemma filter_all : forall (f : cut -> bool) l, (forall x, In x l -> f x = true) -> filter f l = l.
Proof.
  intros f l. induction l as [|x l IH]; intros H; simpl; auto.
  rewrite H by (left; reflexivity). f_equal. apply IH. intros; apply H; right; assumption.
Qed.

(** The budget. *)
Definition wsum (l : list cut) : nat := fold_right (fun x acc => cbytes x + acc) 0 l.

(** A pair's cuts with their chunks, from chunk state [st]. *)
Fixpoint chunkseq (budget : nat) (st : nat * nat) (l : list cut) : list (nat * cut) :=
  match l with
  | [] => []
  | x :: l' => let st' := step budget st (cbytes x) in (fst st', x) :: chunkseq budget st' l'
  end.

Lemma cspec_one_pair : forall budget a b (l pre : list cut),
  (forall x, In x (pre ++ l) -> onpair a b x = true) ->
  cspec budget pre l = chunkseq budget (runs budget pre) l.
Proof.
  intros budget a b l. induction l as [|x l IH]; intros pre H; simpl; [reflexivity|].
  assert (Hx : onpair a b x = true) by (apply H; apply in_or_app; right; left; reflexivity).
  assert (F : filter (onpair (csrc x) (cdst x)) (pre ++ [x]) = pre ++ [x]).
  { unfold onpair in Hx. apply andb_prop in Hx as [E1 E2]. apply Nat.eqb_eq in E1, E2. rewrite E1, E2.
    apply filter_all. intros y Hy. apply H.
    apply in_app_or in Hy as [Hy|Hy]; apply in_or_app; [left; exact Hy|right; destruct Hy as [<-|[]]; left; reflexivity]. }
  rewrite F, runs_snoc. f_equal. rewrite <- runs_snoc. apply IH. rewrite <- app_assoc. exact H.
Qed.

Lemma chunkseq_mono : forall budget (l : list cut) st p, In p (chunkseq budget st l) -> fst st <= fst p.
Proof.
  intros budget l. induction l as [|x l IH]; intros st p H; simpl in H; [contradiction|].
  assert (S : fst st <= fst (step budget st (cbytes x))).
  { unfold step. destruct (_ && _); simpl; lia. }
  destruct H as [<-|H]; [exact S|]. specialize (IH _ _ H). lia.
Qed.

Definition ofchunk (k : nat) (L : list (nat * cut)) : list cut := map snd (filter (fun p => fst p =? k) L).

Lemma chunkseq_budget : forall budget (l : list cut) st k,
  let S := ofchunk k (chunkseq budget st l) in
  (k = fst st -> snd st + wsum S <= budget \/ S = [] \/ exists y, In y S /\ snd st + wsum S = cbytes y) /\
  (k <> fst st -> wsum S <= budget \/ exists y, In y S /\ wsum S = cbytes y).
Proof.
  intros budget l. induction l as [|x l IH]; intros [k0 ld] k; simpl.
  - split; intros; [right; left; reflexivity|left; lia].
  - unfold ofchunk in *. cbv beta iota zeta delta [step]. simpl.
    destruct ((0 <? ld) && (budget <? ld + cbytes x)) eqn:C; simpl.
    + (* x opens chunk k0 + 1 *)
      destruct (IH (S k0, cbytes x) k) as [I1 I2]. simpl in I1, I2. split.
      * intros ->. right; left.
        assert (E : filter (fun p => fst p =? k0) (chunkseq budget (S k0, cbytes x) l) = []).
        { assert (Hm := chunkseq_mono budget l (S k0, cbytes x)). simpl in Hm. revert Hm.
          generalize (chunkseq budget (S k0, cbytes x) l) as L.
          intros L. induction L as [|p L IHL]; intros Hm; simpl; [reflexivity|].
          assert (Hp := Hm p (or_introl eq_refl)).
          replace (fst p =? k0) with false by (symmetry; apply Nat.eqb_neq; lia).
          apply IHL. intros q Hq. apply Hm. right. exact Hq. }
        assert (N : (S k0 =? k0) = false) by (apply Nat.eqb_neq; lia). simpl in N.
        rewrite ?E, ?N; simpl; rewrite ?E; reflexivity.
      * intros Hk. destruct (Nat.eqb_spec (S k0) k) as [<-|Ne].
        -- rewrite Nat.eqb_refl. simpl. destruct (I1 eq_refl) as [L|[L|[y [Hy L]]]].
           ++ left. lia.
           ++ right. exists x. rewrite L. split; [left; reflexivity|simpl; lia].
           ++ right. exists y. split; [right; exact Hy|lia].
        -- assert (N : (S k0 =? k) = false) by (apply Nat.eqb_neq; exact Ne). simpl in N. rewrite N. apply I2. intros E; apply Ne; symmetry; exact E.
    + (* x joins chunk k0 *)
      destruct (IH (k0, ld + cbytes x) k) as [I1 I2]. simpl in I1, I2. split.
      * intros ->. rewrite Nat.eqb_refl. simpl.
        destruct (I1 eq_refl) as [L|[L|[y [Hy L]]]].
        -- left. lia.
        -- rewrite L. simpl. destruct (Nat.eqb_spec ld 0) as [Z|Z].
           ++ right; right. exists x. split; [left; reflexivity|lia].
           ++ left. apply andb_false_iff in C as [C|C]; apply Nat.ltb_ge in C; lia.
        -- right; right. exists y. split; [right; exact Hy|lia].
      * intros Hk. destruct (Nat.eqb_spec k0 k) as [E|_]; [subst; contradiction|]. apply I2. exact Hk.
Qed.

Lemma widen_ge : forall fuel p n, p <= widen fuel p n.
Proof.
  intros fuel. induction fuel as [|f IH]; intros p n; [simpl; lia|].
  cbn [widen]. destruct (p <? n); [specialize (IH (2 * p) n); lia|lia].
Qed.

Lemma width_pos : forall n, 0 < width n.
Proof. intros n. unfold width. assert (H := widen_ge n 2 n). lia. Qed.

(** The chunk of a round number, for a pair. *)
Lemma rid_k : forall w k a b, 0 < w -> k = rid w k a b / 2 / w.
Proof.
  intros w k a b Hw. unfold rid.
  assert (Hc : colour w a b < 2) by (unfold colour; apply Nat.mod_upper_bound; lia).
  assert (Hs : shift w a b < w) by (unfold shift; apply Nat.mod_upper_bound; lia).
  rewrite (Nat.add_comm _ (colour w a b)), Nat.div_add by lia.
  rewrite (Nat.div_small (colour w a b)) by lia. simpl.
  rewrite (Nat.add_comm (k * w)), Nat.div_add by lia. rewrite Nat.div_small by lia. reflexivity.
Qed.

Lemma chunkseq_snd : forall budget (l : list cut) st, map snd (chunkseq budget st l) = l.
Proof. intros budget l. induction l; intros; simpl; f_equal; auto. Qed.

Lemma filter_rid : forall w a b t (C : list (nat * cut)), 0 < w ->
  (forall p, In p C -> onpair a b (snd p) = true) ->
  map snd (filter (fun p => fst p =? t) (map (fun kx => (rid w (fst kx) (csrc (snd kx)) (cdst (snd kx)), snd kx)) C))
  = if rid w (t / 2 / w) a b =? t then ofchunk (t / 2 / w) C else [].
Proof.
  intros w a b t C Hw. unfold ofchunk.
  assert (K : forall k, rid w k a b = t -> k = t / 2 / w) by (intros k R; rewrite <- R; apply rid_k; exact Hw).
  set (k0 := t / 2 / w) in *. clearbody k0.
  induction C as [|[k x] C IH]; intros HC; cbn [map filter].
  - destruct (_ =? t); reflexivity.
  - assert (Hx := HC (k, x) (or_introl eq_refl)). simpl in Hx.
    unfold onpair in Hx. apply andb_prop in Hx as [E1 E2]. apply Nat.eqb_eq in E1, E2. cbn [fst snd].
    rewrite E1, E2.
    assert (IH' := IH (fun p Hp => HC p (or_intror Hp))).
    destruct (Nat.eqb_spec (rid w k a b) t) as [R|R]; cbn [map]; rewrite IH';
      destruct (Nat.eqb_spec (rid w k0 a b) t) as [E|E]; try reflexivity.
    + rewrite (K k R), Nat.eqb_refl. reflexivity.
    + exfalso. apply E. rewrite <- (K k R). exact R.
    + destruct (Nat.eqb_spec k k0) as [Q|Q]; [|reflexivity]. exfalso. apply R. rewrite Q. exact E.
Qed.

(** A rank's round holds, of each pair, the cuts of one chunk of the pair's cuts. *)
Lemma round_pair : forall world budget (l : list cut) a b t xs,
  In (t, xs) (rank_rounds world budget l) ->
  exists k, filter (onpair a b) xs = ofchunk k (chunkseq budget (0, 0) (moving (filter (onpair a b) l))) \/
            filter (onpair a b) xs = [].
Proof.
  intros world budget l a b t xs H. rewrite (rank_rounds_round _ _ _ _ _ H).
  assert (K : forall l : list (nat * cut), filter (onpair a b) (map snd (filter (fun p => fst p =? t) l))
             = map snd (filter (fun p => fst p =? t) (filter (fun p => onpair a b (snd p)) l))).
  { intros L. induction L as [|[t' x] L IH]; simpl; auto.
    destruct (t' =? t) eqn:T; destruct (onpair a b x) eqn:P; simpl; rewrite ?T, ?P, ?IH; reflexivity. }
  rewrite K, numbered_spec. unfold nspec. rewrite filter_map_swap. simpl.
  rewrite cspec_pair. simpl. unfold moving. rewrite filter_comm. fold (moving (filter (onpair a b) l)).
  set (P := moving (filter (onpair a b) l)).
  assert (HP : forall x, In x P -> onpair a b x = true).
  { intros x Hx. unfold P, moving in Hx. apply filter_In in Hx as [Hx _]. apply filter_In in Hx as [_ Hx]. exact Hx. }
  rewrite (cspec_one_pair budget a b P []) by exact HP. change (runs budget []) with (0, 0).
  set (C := chunkseq budget (0, 0) P).
  assert (HC : forall p, In p C -> onpair a b (snd p) = true).
  { intros p Hp. apply HP. rewrite <- (chunkseq_snd budget P (0, 0)). apply in_map. exact Hp. }
  exists (t / 2 / width world). rewrite (filter_rid (width world) a b t C (width_pos world) HC).
  destruct (_ =? t); [left|right]; reflexivity.
Qed.

(** The budget: of each pair, the cuts a rank's round holds weigh at most
    [budget] bytes, or exactly what one of them weighs (a cut larger than
    the budget travels alone, with nothing but empty cuts beside it). *)
Theorem rank_rounds_budget : forall world budget (l : list cut) a b t xs,
  In (t, xs) (rank_rounds world budget l) ->
  wsum (filter (onpair a b) xs) <= budget \/
  exists y, In y (filter (onpair a b) xs) /\ wsum (filter (onpair a b) xs) = cbytes y.
Proof.
  intros world budget l a b t xs H. destruct (round_pair _ _ _ a b _ _ H) as [k [E|E]]; rewrite E.
  - destruct (chunkseq_budget budget (moving (filter (onpair a b) l)) (0, 0) k) as [I1 I2]. simpl in I1, I2.
    destruct (Nat.eq_dec k 0) as [->|Nk].
    + destruct (I1 eq_refl) as [L|[L|L]]; [left; exact L|rewrite L; left; simpl; lia|right; exact L].
    + apply I2. exact Nk.
  - left. simpl. lia.
Qed.

End Proofs.
