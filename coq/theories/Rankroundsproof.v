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

(** One partner per round: the number theory of the shift and the colour. *)
Lemma widen_pow : forall fuel e n, exists e', widen fuel (2 ^ S e) n = 2 ^ S e'.
Proof.
  intros fuel. induction fuel as [|f IH]; intros e n; [exists e; reflexivity|].
  cbn [widen]. destruct (2 ^ S e <? n).
  - destruct (IH (S e) n) as [e' E]. exists e'. rewrite <- E. f_equal.
  - exists e. reflexivity.
Qed.

Lemma width_pow : forall n, exists e, width n = 2 ^ S e.
Proof. intros n. unfold width. apply (widen_pow n 0 n). Qed.

Lemma lowp_spec : forall fuel s, 0 < s <= fuel -> exists i j, lowp fuel s = 2 ^ i /\ s = 2 ^ i * (2 * j + 1).
Proof.
  intros fuel. induction fuel as [|f IH]; intros s Hs; [lia|]. cbn [lowp].
  assert (Dm := Nat.div_mod s 2 ltac:(lia)). assert (Bm := Nat.mod_upper_bound s 2 ltac:(lia)).
  destruct (Nat.eqb_spec (s mod 2) 1) as [O|O].
  - exists 0, (s / 2). rewrite Nat.pow_0_r. split; [reflexivity|lia].
  - set (m := s / 2) in *. assert (Hm : s = 2 * m) by lia. clearbody m. subst s.

    destruct (IH m ltac:(lia)) as [i [j [E1 E2]]]. exists (S i), j. rewrite E1. simpl. lia.
Qed.

Lemma shift_val : forall w a b, a < w -> b < w -> shift w a b = if a <=? b then b - a else b + w - a.
Proof.
  intros w a b Ha Hb. unfold shift. rewrite (Nat.mod_small a) by lia.
  destruct (Nat.leb_spec a b).
  - replace (b + w - a) with ((b - a) + 1 * w) by lia. rewrite Nat.mod_add by lia. apply Nat.mod_small. lia.
  - apply Nat.mod_small. lia.
Qed.

Lemma rid_parts : forall w k a b, 0 < w ->
  colour w a b = rid w k a b mod 2 /\ shift w a b = (rid w k a b / 2) mod w.
Proof.
  intros w k a b Hw. unfold rid.
  assert (Hc : colour w a b < 2) by (unfold colour; apply Nat.mod_upper_bound; lia).
  assert (Hs : shift w a b < w) by (unfold shift; apply Nat.mod_upper_bound; lia).
  split.
  - rewrite (Nat.add_comm _ (colour w a b)), Nat.mod_add by lia. symmetry; apply Nat.mod_small; exact Hc.
  - rewrite (Nat.add_comm _ (colour w a b)), Nat.div_add by lia.
    rewrite (Nat.div_small (colour w a b)) by lia. simpl.
    rewrite (Nat.add_comm (k * w)), Nat.mod_add by lia. symmetry; apply Nat.mod_small; exact Hs.
Qed.

(** A rank's sending and receiving partners of one shift get different colours. *)
Lemma colour_differs : forall n r b a', let w := width n in
  r < w -> b < w -> a' < w -> r <> b -> a' <> r ->
  shift w r b = shift w a' r -> colour w r b <> colour w a' r.
Proof.
  intros n r b a' w Hr Hb Ha Nrb Nar E. unfold colour. rewrite <- E.
  destruct (width_pow n) as [e We]. fold w in We.
  set (s := shift w r b) in *.
  assert (Vs1 := shift_val w r b Hr Hb). assert (Vs2 := shift_val w a' r Ha Hr). fold s in Vs1. rewrite <- E in Vs2. fold s in Vs2.
  assert (Sp : 0 < s < w) by (destruct (Nat.leb_spec r b); destruct (Nat.leb_spec a' r); lia).
  destruct (lowp_spec s s ltac:(lia)) as [i [j [Lp Sd]]]. rewrite Lp.
  assert (Pi : 0 < 2 ^ i) by (apply Nat.neq_0_lt_0; apply Nat.pow_nonzero; lia).
  assert (Ii : i < S e).
  { destruct (Nat.lt_ge_cases i (S e)) as [L|L]; [exact L|].
    assert (Hle := Nat.pow_le_mono_r 2 _ _ ltac:(lia) L). nia. }
  assert (Wd : w = 2 ^ i * (2 * 2 ^ (e - i))).
  { rewrite We. rewrite <- Nat.pow_succ_r', <- Nat.pow_add_r. f_equal. lia. }
  set (q := 2 ^ (e - i)) in *. set (p := 2 ^ i) in *.
  (* a' + s is r or r + w *)
  assert (D : a' + s = r \/ a' + s = r + w) by (destruct (Nat.leb_spec r b); destruct (Nat.leb_spec a' r); lia).
  assert (U : (a' + s) / p = a' / p + (2 * j + 1)) by (rewrite Sd, Nat.mul_comm, Nat.div_add; lia).
  intros C.
  assert (M1 := Nat.div_mod (a' / p) 2 ltac:(lia)). assert (M2 := Nat.div_mod (r / p) 2 ltac:(lia)).
  assert (B1 := Nat.mod_upper_bound (a' / p) 2 ltac:(lia)). assert (B2 := Nat.mod_upper_bound (r / p) 2 ltac:(lia)).
  destruct D as [D|D].
  - rewrite D in U. lia.
  - rewrite D, Wd in U. replace (r + p * (2 * q)) with (r + (2 * q) * p) in U by lia.
    rewrite Nat.div_add in U by lia. lia.
Qed.

Lemma pair_unique : forall n r k a b k' a' b', let w := width n in
  a < w -> b < w -> a' < w -> b' < w -> a <> b -> a' <> b' ->
  (r = a \/ r = b) -> (r = a' \/ r = b') ->
  rid w k a b = rid w k' a' b' -> a = a' /\ b = b'.
Proof.
  intros n r k a b k' a' b' w Ha Hb Ha' Hb' N N' R R' E.
  assert (Wp : 0 < w) by apply width_pos.
  destruct (rid_parts w k a b Wp) as [C1 S1]. destruct (rid_parts w k' a' b' Wp) as [C2 S2].
  rewrite E in C1, S1. rewrite <- C2 in C1. rewrite <- S2 in S1. clear C2 S2 E.
  destruct R as [Ra|Rb]; destruct R' as [Ra'|Rb'].
  - rewrite (shift_val w a b), (shift_val w a' b') in S1 by assumption.
    destruct (Nat.leb_spec a b); destruct (Nat.leb_spec a' b'); split; lia.
  - exfalso. replace b' with a in * by lia. apply (colour_differs n a b a'); auto; lia.
  - exfalso. replace a' with b in * by lia. apply (colour_differs n b b' a); auto; try lia; symmetry; assumption.
  - rewrite (shift_val w a b), (shift_val w a' b') in S1 by assumption.
    destruct (Nat.leb_spec a b); destruct (Nat.leb_spec a' b'); split; lia.
Qed.

Lemma numbered_rid : forall world budget (l : list cut) t x,
  In (t, x) (numbered world budget l) ->
  In x (moving l) /\ exists k, t = rid (width world) k (csrc x) (cdst x).
Proof.
  intros world budget l t x H. split.
  - rewrite <- (numbered_snd world budget l). apply in_map_iff. exists (t, x). split; [reflexivity|exact H].
  - rewrite numbered_spec in H. unfold nspec in H. apply in_map_iff in H as [[k x'] [E _]].
    simpl in E. injection E as E1 E2. subst x'. exists k. symmetry; exact E1.
Qed.

(** One partner per round: when every cut of the list is sent or received
    by rank [r] and its ranks are below [W] (the world size rounded up to a
    power of two), the cuts of any one round are all between the same
    sender and receiver: a rank meets each round number with one partner,
    in one direction. *)
Theorem rank_rounds_partner : forall world budget (l : list cut) r t xs x y,
  (forall z, In z l -> (csrc z = r \/ cdst z = r) /\ csrc z < width world /\ cdst z < width world) ->
  In (t, xs) (rank_rounds world budget l) -> In x xs -> In y xs ->
  csrc x = csrc y /\ cdst x = cdst y.
Proof.
  intros world budget l r t xs x y Hl H Hx Hy.
  destruct (numbered_rid _ _ _ _ _ (in_rounds_numbered _ _ _ _ _ _ H Hx)) as [Mx [kx Ex]].
  destruct (numbered_rid _ _ _ _ _ (in_rounds_numbered _ _ _ _ _ _ H Hy)) as [My [ky Ey]].
  unfold moving in Mx, My. apply filter_In in Mx as [Mx Nx]. apply filter_In in My as [My Ny].
  apply negb_true_iff, Nat.eqb_neq in Nx, Ny.
  destruct (Hl x Mx) as [Rx [Sx Dx]]. destruct (Hl y My) as [Ry [Sy Dy]].
  apply (pair_unique world r kx _ _ ky); auto.
  - destruct Rx; auto.
  - destruct Ry; auto.
  - rewrite <- Ex. exact Ey.
Qed.

(** Every cut once. *)
Lemma filter_filter_comm_local : forall (f g : nat * cut -> bool) l,
  (forall p, f p = true -> g p = true) -> filter f (filter g l) = filter f l.
Proof.
  intros f g l H. induction l as [|x l IH]; simpl; auto.
  destruct (g x) eqn:G; simpl; rewrite ?IH; auto.
  destruct (f x) eqn:F; auto. rewrite H in G by exact F. discriminate.
Qed.

Lemma perm_split : forall {B} (f : B -> bool) (l : list B),
  Permutation l (filter f l ++ filter (fun x => negb (f x)) l).
Proof.
  intros B f l. induction l as [|x l IH]; simpl; [constructor|].
  destruct (f x); simpl; [constructor; exact IH|apply Permutation_cons_app; exact IH].
Qed.

Lemma perm_buckets : forall (K : list nat) (N : list (nat * cut)),
  NoDup K -> (forall p, In p N -> In (fst p) K) ->
  Permutation (map snd N) (concat (map (fun t => map snd (filter (fun p => fst p =? t) N)) K)).
Proof.
  intros K. induction K as [|t0 K IH]; intros N D C; simpl.
  - destruct N as [|p N]; [constructor|]. exfalso. exact (C p (or_introl eq_refl)).
  - inversion D as [|? ? Nt D']; subst.
    set (N' := filter (fun p => negb (fst p =? t0)) N).
    assert (E : map (fun t => map snd (filter (fun p => fst p =? t) N)) K
              = map (fun t => map snd (filter (fun p => fst p =? t) N')) K).
    { apply map_ext_in. intros t Ht. f_equal. unfold N'. rewrite filter_filter_comm_local.
      - reflexivity.
      - intros p Hp. apply Nat.eqb_eq in Hp. apply negb_true_iff, Nat.eqb_neq. intros Q.
        apply Nt. rewrite <- Q, Hp. exact Ht. }
    rewrite E. rewrite (perm_split (fun p => fst p =? t0) N) at 1. rewrite map_app.
    apply Permutation_app_head. apply IH; [exact D'|].
    intros p Hp. unfold N' in Hp. apply filter_In in Hp as [Hp Np]. apply negb_true_iff, Nat.eqb_neq in Np.
    destruct (C p Hp) as [H|H]; [subst; contradiction|exact H].
Qed.

Lemma nodup_keys : forall (E : list (nat * list cut)), NoDupA (@NatMap.eq_key _) E -> NoDup (map fst E).
Proof.
  intros E D. induction D as [|p E Np D IH]; simpl; constructor; [|exact IH].
  intros H. apply Np. apply in_map_iff in H as [q [Eq Hq]]. apply InA_alt. exists q. split; [|exact Hq].
  symmetry; exact Eq.
Qed.

(** Every moving cut of the rank (sender and receiver differ) is in
    exactly one of its rounds, once: the rounds' cuts are a permutation of
    the moving cuts. *)
Theorem rank_rounds_perm : forall world budget (l : list cut),
  Permutation (concat (map snd (rank_rounds world budget l))) (moving l).
Proof.
  intros world budget l. set (N := numbered world budget l).
  set (g := fun t => map snd (filter (fun p => fst p =? t) N)).
  assert (E : map snd (rank_rounds world budget l) = map g (map fst (rank_rounds world budget l))).
  { rewrite map_map. apply map_ext_in. intros [t xs] H. simpl. apply rank_rounds_round. exact H. }
  rewrite E, <- (numbered_snd world budget l). fold N. symmetry. apply perm_buckets.
  - unfold rank_rounds. rewrite map_map. simpl. apply nodup_keys. apply NatMap.elements_3w.
  - intros [t x] H. destruct (rank_rounds_cover world budget l t x H) as [xs [Hr _]].
    apply in_map_iff. exists (t, xs). split; [reflexivity|exact Hr].
Qed.

End Proofs.
