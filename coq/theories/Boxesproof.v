(** Proofs for [Boxes.v]: box subtraction splits a box exactly, and the
    schedule [bsched] of a target rank covers its box once, every piece from
    a rank that holds it, and from the target itself exactly where it holds
    the index ([bsched_correct]). *)
From Coq Require Import List Arith Lia Bool.
From VS Require Import Crossmesh Boxes.
Import ListNotations.

Ltac cmp_lia :=
  repeat match goal with
  | |- context [?a <=? ?b] => destruct (Nat.leb_spec a b)
  | |- context [?a <? ?b] => destruct (Nat.ltb_spec a b)
  end; simpl; try reflexivity; try lia.

(** One dimension: the part before [b], the part after it and the overlap
    are disjoint and make up [a]. *)
Lemma split1 : forall x a b,
  let L := insideb x (fst a, Nat.min (fst a + snd a) (fst b) - fst a) in
  let R := insideb x (Nat.max (fst a) (fst b + snd b), fst a + snd a - Nat.max (fst a) (fst b + snd b)) in
  let M := insideb x (imeet a b) in
  L && R = false /\ L && M = false /\ R && M = false /\ L || R || M = insideb x a
  /\ M = insideb x a && insideb x b /\ (L || R) = insideb x a && negb (insideb x b).
Proof.
  intros x [s l] [t k]. unfold insideb, imeet; simpl.
  repeat split; cmp_lia.
Qed.

Lemma hits_cons : forall p B L, hits p (B :: L) = (if in_boxb p B then 1 else 0) + hits p L.
Proof. intros. unfold hits. simpl. destruct (in_boxb p B); reflexivity. Qed.

Lemma hits_app : forall p L1 L2, hits p (L1 ++ L2) = hits p L1 + hits p L2.
Proof. intros. unfold hits. rewrite filter_app, app_length. reflexivity. Qed.

Lemma hits_map_cons : forall x p iv L,
  hits (x :: p) (map (fun R => iv :: R) L) = if insideb x iv then hits p L else 0.
Proof.
  intros x p iv L. induction L as [|R L IH]; simpl.
  - destruct (insideb x iv); reflexivity.
  - rewrite !hits_cons, IH. simpl. destruct (insideb x iv), (in_boxb p R); reflexivity.
Qed.

Lemma hits_nil_map_cons : forall iv L, hits [] (map (fun R => iv :: R) L) = 0.
Proof. intros iv L. induction L as [|R L IH]; simpl; auto. Qed.

Lemma in_boxb_len : forall p B, in_boxb p B = true -> length p = length B.
Proof.
  induction p as [|x p IH]; destruct B as [|iv B]; simpl; try discriminate; auto.
  intro H. apply andb_true_iff in H as [_ H]. f_equal. auto.
Qed.

(** Box subtraction: every index of [A] outside [B] lies in exactly one box
    of [bsub A B], every other index in none. *)
Lemma bsub_hits : forall A B p, length A = length B ->
  hits p (bsub A B) = if in_boxb p A && negb (in_boxb p B) then 1 else 0.
Proof.
  induction A as [|a A IH]; destruct B as [|b B]; simpl; intros p Hl; try discriminate.
  - destruct p; reflexivity.
  - injection Hl as Hl.
    destruct p as [|x p].
    + rewrite !hits_cons, hits_nil_map_cons. reflexivity.
    + rewrite !hits_cons, hits_map_cons, (IH B p Hl). simpl.
      destruct (split1 x a b) as (H1 & H2 & H3 & H4 & H5 & H6).
      destruct (insideb x (fst a, Nat.min (fst a + snd a) (fst b) - fst a)),
               (insideb x (Nat.max (fst a) (fst b + snd b), fst a + snd a - Nat.max (fst a) (fst b + snd b))),
               (insideb x (imeet a b)), (insideb x a), (insideb x b), (in_boxb p A), (in_boxb p B);
        simpl in *; try discriminate; reflexivity.
Qed.

Lemma bsub_in : forall A B R p, length A = length B -> In R (bsub A B) -> in_boxb p R = true ->
  in_boxb p A = true /\ in_boxb p B = false.
Proof.
  intros A B R p Hl HR Hp.
  assert (H : hits p (bsub A B) > 0).
  { unfold hits. apply in_split in HR as (L1 & L2 & ->). rewrite filter_app, app_length. simpl.
    rewrite Hp. simpl. lia. }
  rewrite bsub_hits in H by exact Hl.
  destruct (in_boxb p A), (in_boxb p B); simpl in H; try lia; auto.
Qed.

Lemma bsub_length : forall A B R, In R (bsub A B) -> length R = length A.
Proof.
  induction A as [|a A IH]; destruct B as [|b B]; simpl; intros R HR;
    try (destruct HR as [<-|[]]; reflexivity); try contradiction.
  destruct HR as [<-|[<-|HR]]; simpl; auto.
  apply in_map_iff in HR as (R' & <- & HR'). simpl. f_equal. eauto.
Qed.

Lemma insideb_meet : forall x a b, insideb x (imeet a b) = insideb x a && insideb x b.
Proof. intros. destruct (split1 x a b) as (_ & _ & _ & _ & H & _). exact H. Qed.

Lemma bmeet_in : forall A B p, length A = length B -> in_boxb p (bmeet A B) = in_boxb p A && in_boxb p B.
Proof.
  induction A as [|a A IH]; destruct B as [|b B]; simpl; intros p Hl; try discriminate.
  - destruct p; reflexivity.
  - injection Hl as Hl. destruct p as [|x p]; simpl; auto.
    rewrite insideb_meet, IH by exact Hl.
    destruct (insideb x a), (insideb x b), (in_boxb p A), (in_boxb p B); reflexivity.
Qed.

(** Every box has [n] dimensions. *)
Definition dims (n : nat) (L : list box) : Prop := forall R, In R L -> length R = n.

Lemma hits_meets : forall p (r : nat) (B : box) (rem : list box) n, dims n rem -> length B = n ->
  hits p (map snd (map (fun R => (r, bmeet R B)) rem)) = if in_boxb p B then hits p rem else 0.
Proof.
  intros p r B rem n Hd HB. induction rem as [|R rem IH]; simpl.
  - destruct (in_boxb p B); reflexivity.
  - rewrite !hits_cons, IH by (intros R' HR'; apply Hd; right; exact HR').
    rewrite bmeet_in by (rewrite (Hd R (or_introl eq_refl)); auto).
    destruct (in_boxb p R), (in_boxb p B); reflexivity.
Qed.

Lemma hits_subs : forall p B rem n, dims n rem -> length B = n ->
  hits p (flat_map (fun R => bsub R B) rem) = if in_boxb p B then 0 else hits p rem.
Proof.
  intros p B rem n Hd HB. induction rem as [|R rem IH]; simpl.
  - destruct (in_boxb p B); reflexivity.
  - rewrite hits_app, hits_cons, IH by (intros R' HR'; apply Hd; right; exact HR').
    rewrite bsub_hits by (rewrite (Hd R (or_introl eq_refl)); auto).
    destruct (in_boxb p R), (in_boxb p B); reflexivity.
Qed.

Lemma dims_subs : forall B rem n, dims n rem -> dims n (flat_map (fun R => bsub R B) rem).
Proof.
  intros B rem n Hd R' HR'. apply in_flat_map in HR' as (R & HR & HR').
  rewrite (bsub_length _ _ _ HR'). auto.
Qed.

Definition src_dims (n : nat) (srcs : layout) : Prop := forall s, In s srcs -> length (snd s) = n.

(** A box holding an index is not empty, so dropping empty boxes keeps
    every count of [hits]. *)
Lemma in_nonempty : forall p B, in_boxb p B = true -> nonempty B = true.
Proof.
  induction p as [|x p IH]; destruct B as [|iv B]; simpl; try discriminate; auto.
  intro H. apply andb_true_iff in H as [Hx H]. unfold insideb in Hx.
  apply andb_true_iff in Hx as [H1 H2]. apply Nat.leb_le in H1. apply Nat.ltb_lt in H2.
  rewrite (IH B H), andb_true_r. apply Nat.ltb_lt. lia.
Qed.

Lemma hits_prune : forall p L, hits p (filter nonempty L) = hits p L.
Proof.
  intros p L. induction L as [|R L IH]; simpl; auto.
  destruct (nonempty R) eqn:E; rewrite ?hits_cons, IH; auto.
  destruct (in_boxb p R) eqn:Hp; auto. rewrite (in_nonempty _ _ Hp) in E. discriminate.
Qed.

Lemma hits_prune_pieces : forall p (L : list (nat * box)),
  hits p (map snd (filter (fun q => nonempty (snd q)) L)) = hits p (map snd L).
Proof.
  intros p L. induction L as [|[r R] L IH]; simpl; auto.
  destruct (nonempty R) eqn:E; simpl; rewrite ?hits_cons, IH; auto.
  destruct (in_boxb p R) eqn:Hp; auto. rewrite (in_nonempty _ _ Hp) in E. discriminate.
Qed.

Lemma dims_prune : forall n L, dims n L -> dims n (filter nonempty L).
Proof. intros n L Hd R HR. apply filter_In in HR as [HR _]. auto. Qed.

(** The pieces hold every index of the missing boxes that some holder
    holds, once per missing box holding it, and nothing else. *)
Lemma cover_hits : forall srcs rem n p, dims n rem -> src_dims n srcs ->
  hits p (map snd (cover srcs rem)) = if held_by_any p srcs then hits p rem else 0.
Proof.
  induction srcs as [|[r B] srcs IH]; intros rem n p Hd Hs; simpl; auto.
  assert (HB : length B = n) by exact (Hs (r, B) (or_introl eq_refl)).
  assert (Hs' : src_dims n srcs) by (intros s Hin; apply Hs; right; exact Hin).
  rewrite map_app, hits_app, hits_prune_pieces, (hits_meets p r B rem n Hd HB),
    (IH _ n p (dims_prune _ _ (dims_subs B rem n Hd)) Hs'), hits_prune.
  rewrite (hits_subs p B rem n Hd HB).
  destruct (in_boxb p B), (held_by_any p srcs); simpl; lia.
Qed.

(** A piece's index lies in a missing box, and its sender is the first
    holder of the index. *)
Lemma cover_sender : forall srcs rem n p r B', dims n rem -> src_dims n srcs ->
  In (r, B') (cover srcs rem) -> in_boxb p B' = true ->
  (exists R, In R rem /\ in_boxb p R = true) /\ first_holder p srcs = Some r.
Proof.
  induction srcs as [|[q B] srcs IH]; intros rem n p r B' Hd Hs Hin Hp; simpl in *; [contradiction|].
  assert (HB : length B = n) by exact (Hs (q, B) (or_introl eq_refl)).
  assert (Hs' : src_dims n srcs) by (intros s Hs1; apply Hs; right; exact Hs1).
  apply in_app_or in Hin as [Hin|Hin].
  - apply filter_In in Hin as [Hin _]. apply in_map_iff in Hin as (R & Heq & HR). injection Heq as <- <-.
    rewrite bmeet_in in Hp by (rewrite (Hd R HR); auto).
    apply andb_true_iff in Hp as [HpR HpB]. rewrite HpB. eauto.
  - destruct (IH _ n p r B' (dims_prune _ _ (dims_subs B rem n Hd)) Hs' Hin Hp) as ((R' & HR' & HpR') & Hfirst).
    apply filter_In in HR' as [HR' _]. apply in_flat_map in HR' as (R & HR & HR'').
    destruct (bsub_in R B R' p) as [HpR HpB]; auto.
    { rewrite (Hd R HR); auto. }
    rewrite HpB. eauto.
Qed.

Lemma first_holder_app : forall p l1 l2, first_holder p (l1 ++ l2) =
  match first_holder p l1 with Some r => Some r | None => first_holder p l2 end.
Proof.
  intros p l1 l2. induction l1 as [|[r B] l1 IH]; simpl; auto.
  destruct (in_boxb p B); auto.
Qed.

Lemma first_holder_some : forall p l r, first_holder p l = Some r -> exists S, In (r, S) l /\ in_boxb p S = true.
Proof.
  intros p l r. induction l as [|[q B] l IH]; simpl; intro H; try discriminate.
  destruct (in_boxb p B) eqn:E.
  - injection H as <-. eauto.
  - destruct (IH H) as (S & HS & HpS). eauto.
Qed.

Lemma first_holder_none : forall p l, first_holder p l = None -> forall r S, In (r, S) l -> in_boxb p S = false.
Proof.
  intros p l. induction l as [|[q B] l IH]; simpl; intros H r S Hin; [contradiction|].
  destruct (in_boxb p B) eqn:E; try discriminate.
  destruct Hin as [Heq|Hin]; [injection Heq as <- <-; exact E | eauto].
Qed.

Lemma in_self_first : forall j l s, In s (self_first j l) <-> In s l.
Proof.
  intros j l s. unfold self_first. rewrite in_app_iff, !filter_In.
  destruct (fst s =? j); simpl; intuition.
Qed.

Lemma held_self_first : forall p j l, held_by_any p (self_first j l) = held_by_any p l.
Proof.
  intros p j l. unfold held_by_any.
  destruct (existsb _ l) eqn:E.
  - apply existsb_exists in E as (s & Hs & Hp). apply existsb_exists. exists s. rewrite in_self_first. auto.
  - apply not_true_iff_false. intro H. apply existsb_exists in H as (s & Hs & Hp).
    rewrite in_self_first in Hs.
    assert (existsb (fun s => in_boxb p (snd s)) l = true) by (apply existsb_exists; eauto).
    congruence.
Qed.

(** The first holder in [self_first j l] is [j] exactly when [j] holds the index. *)
Lemma first_holder_self : forall p j l r, first_holder p (self_first j l) = Some r ->
  (exists S, In (r, S) l /\ in_boxb p S = true) /\ (r = j <-> exists S, In (j, S) l /\ in_boxb p S = true).
Proof.
  intros p j l r H.
  destruct (first_holder_some _ _ _ H) as (S & HS & HpS).
  rewrite in_self_first in HS. split; [eauto|]. split.
  - intros ->. eauto.
  - intros (S' & HS' & HpS'). unfold self_first in H. rewrite first_holder_app in H.
    destruct (first_holder p (filter (fun s => fst s =? j) l)) as [q|] eqn:E.
    + injection H as <-. destruct (first_holder_some _ _ _ E) as (S'' & HS'' & _).
      apply filter_In in HS'' as [_ Hq]. apply Nat.eqb_eq in Hq. exact Hq.
    + exfalso. assert (Hf : In (j, S') (filter (fun s => fst s =? j) l)).
      { apply filter_In. simpl. rewrite Nat.eqb_refl. auto. }
      rewrite (first_holder_none _ _ E _ _ Hf) in HpS'. discriminate.
Qed.

(** The schedule of a target rank [j] with box [T], from holders [srcs]
    whose boxes have [T]'s number of dimensions: every piece lies in [T]
    and in its sender's box, and its sender is [j] exactly where [j] holds
    the index (so [j] receives from other ranks exactly the indices of [T]
    it does not hold); every index of [T] that some rank holds lies in
    exactly one piece, every other index in none. *)
Theorem bsched_correct : forall srcs j T, src_dims (length T) srcs ->
  (forall r B p, In (r, B) (bsched srcs j T) -> in_boxb p B = true ->
     in_boxb p T = true /\ (exists S, In (r, S) srcs /\ in_boxb p S = true)
     /\ (r = j <-> exists S, In (j, S) srcs /\ in_boxb p S = true))
  /\ (forall p, in_boxb p T = true -> hits p (map snd (bsched srcs j T)) = if held_by_any p srcs then 1 else 0).
Proof.
  intros srcs j T Hs.
  assert (Hd : dims (length T) [T]) by (intros R [<-|[]]; reflexivity).
  assert (Hs' : src_dims (length T) (self_first j srcs)).
  { intros s Hin. apply Hs. apply in_self_first in Hin. exact Hin. }
  split.
  - intros r B p Hin Hp. unfold bsched in Hin.
    destruct (cover_sender _ _ _ p r B Hd Hs' Hin Hp) as ((R & [<-|[]] & HpR) & Hfirst).
    split; [exact HpR|]. exact (first_holder_self _ _ _ _ Hfirst).
  - intros p Hp. unfold bsched. pose proof (cover_hits (self_first j srcs) [T] (length T) p Hd Hs') as H.
    etransitivity; [exact H|]. rewrite held_self_first, hits_cons, Hp.
    destruct (held_by_any p srcs); reflexivity.
Qed.

(** The schedule from any list [W] of holders taken from [srcs] that holds
    every holder of [srcs] meeting [T] (a window of them) keeps every
    guarantee of [bsched_correct] over all of [srcs]: the holders left out
    hold no index of [T]. *)
Definition window_of (srcs W : layout) (T : box) : Prop :=
  (forall s, In s W -> In s srcs) /\
  (forall s p, In s srcs -> in_boxb p T = true -> in_boxb p (snd s) = true -> In s W).

Lemma held_window : forall srcs W T p, window_of srcs W T -> in_boxb p T = true ->
  held_by_any p W = held_by_any p srcs.
Proof.
  intros srcs W T p [Hsub Hall] HpT. unfold held_by_any.
  destruct (existsb _ srcs) eqn:E.
  - apply existsb_exists in E as (s & Hs & Hp). apply existsb_exists. exists s. split; [|exact Hp].
    exact (Hall s p Hs HpT Hp).
  - apply not_true_iff_false. intro H. apply existsb_exists in H as (s & Hs & Hp).
    assert (existsb (fun s => in_boxb p (snd s)) srcs = true) by (apply existsb_exists; eauto).
    congruence.
Qed.

Theorem bsched_window_correct : forall srcs W j T, src_dims (length T) srcs -> window_of srcs W T ->
  (forall r B p, In (r, B) (cover (self_first j W) [T]) -> in_boxb p B = true ->
     in_boxb p T = true /\ (exists S, In (r, S) srcs /\ in_boxb p S = true)
     /\ (r = j <-> exists S, In (j, S) srcs /\ in_boxb p S = true))
  /\ (forall p, in_boxb p T = true -> hits p (map snd (cover (self_first j W) [T])) = if held_by_any p srcs then 1 else 0).
Proof.
  intros srcs W j T Hs Hw.
  assert (Hd : dims (length T) [T]) by (intros R [<-|[]]; reflexivity).
  assert (Hs' : src_dims (length T) (self_first j W)).
  { intros s Hin. apply Hs. apply in_self_first in Hin. exact (proj1 Hw s Hin). }
  split.
  - intros r B p Hin Hp.
    destruct (cover_sender _ _ _ p r B Hd Hs' Hin Hp) as ((R & [<-|[]] & HpR) & Hfirst).
    destruct (first_holder_self _ _ _ _ Hfirst) as [(S & HS & HpS) Hself].
    split; [exact HpR|]. split; [exists S; split; [exact (proj1 Hw _ HS)|exact HpS]|].
    rewrite Hself. split; intros (S' & HS' & HpS'); exists S'; split; auto.
    + exact (proj1 Hw _ HS').
    + exact (proj2 Hw _ p HS' HpR HpS').
  - intros p Hp. pose proof (cover_hits (self_first j W) [T] (length T) p Hd Hs') as H.
    etransitivity; [exact H|]. rewrite held_self_first, (held_window srcs W T p Hw Hp), hits_cons, Hp.
    destruct (held_by_any p srcs); reflexivity.
Qed.

Lemma maxof_ge : forall A (f : A -> nat) l x, In x l -> f x <= maxof f l.
Proof.
  intros A f l x. induction l as [|y l IH]; simpl; [contradiction|].
  intros [<-|H]; [lia|]. specialize (IH H). lia.
Qed.

Lemma minof_le : forall A (f : A -> nat) l d x, In x l -> minof f l d <= f x.
Proof.
  intros A f l d x. induction l as [|y l IH]; simpl; [contradiction|].
  intros [<-|H]; [lia|]. specialize (IH H). lia.
Qed.

(** The tree keeps its holders. *)
Lemma kquery_sub : forall fuel l T s, In s (kquery T (kbuild fuel l)) -> In s l.
Proof.
  intros fuel. induction fuel as [|f IH]; intros l T s H; [exact H|].
  destruct l as [|x l']; [exact H|]. cbn [kbuild] in H.
  set (e := best_dim (x :: l')) in H.
  set (k := minof (skey e) (x :: l') (skey e x) + _ / 2) in H.
  destruct (filter (fun s => k <? skey e s) (x :: l')) as [|y ys] eqn:F; [exact H|].
  cbn [kquery] in H. destruct (meets1 _ _ _ _); [|contradiction].
  apply in_app_or in H as [H|H]; apply IH in H.
  - apply filter_In in H. exact (proj1 H).
  - rewrite <- F in H. apply filter_In in H. exact (proj1 H).
Qed.
(** An index inside a box lies, along every dimension, in its interval. *)
Lemma in_boxb_nth : forall p B d, in_boxb p B = true -> d < length B ->
  fst (nth d B (0, 0)) <= nth d p 0 < fst (nth d B (0, 0)) + snd (nth d B (0, 0)).
Proof.
  induction p as [|x p IH]; destruct B as [|iv B]; simpl; intros d H Hd; try discriminate; try lia.
  apply andb_true_iff in H as [Hx H]. destruct d as [|d].
  - unfold insideb in Hx. apply andb_true_iff in Hx as [H1 H2].
    apply Nat.leb_le in H1. apply Nat.ltb_lt in H2. lia.
  - apply IH; [exact H|lia].
Qed.

(** A query gives every holder of the tree meeting [T]: a node's span
    along its dimension holds every one of its holders' intervals. *)
Lemma kquery_all : forall fuel l T s p, In s l -> in_boxb p T = true -> in_boxb p (snd s) = true ->
  In s (kquery T (kbuild fuel l)).
Proof.
  intros fuel. induction fuel as [|f IH]; intros l T s p H HpT Hps; [exact H|].
  destruct l as [|x l']; [exact H|]. cbn [kbuild].
  set (e := best_dim (x :: l')).
  set (mn := minof (skey e) (x :: l') (skey e x)).
  set (k := mn + _ / 2).
  destruct (filter (fun s => k <? skey e s) (x :: l')) as [|y ys] eqn:F; [exact H|].
  cbn [kquery].
  set (mx := maxof (send e) (x :: l')).
  assert (Hm : meets1 T e mn mx = true).
  { unfold meets1. destruct (e <? length T) eqn:Ee; [|reflexivity]. simpl.
    apply Nat.ltb_lt in Ee.
    assert (Hl : length (snd s) = length T) by (rewrite <- (in_boxb_len _ _ Hps); exact (in_boxb_len _ _ HpT)).
    pose proof (in_boxb_nth p T e HpT Ee) as HT. pose proof (in_boxb_nth p (snd s) e Hps ltac:(lia)) as HS.
    assert (H1 : mn <= skey e s) by exact (minof_le _ (skey e) (x :: l') (skey e x) s H).
    assert (H2 : send e s <= mx) by exact (maxof_ge _ (send e) (x :: l') s H).
    unfold send, skey in H1, H2. apply andb_true_iff; split; apply Nat.ltb_lt; lia. }
  rewrite Hm. apply in_or_app. destruct (Nat.le_gt_cases (skey e s) k) as [Hle|Hgt].
  - left. apply (IH _ T s p); auto. apply filter_In. split; auto. apply Nat.leb_le; auto.
  - right. apply (IH _ T s p); auto. rewrite <- F. apply filter_In. split; auto. apply Nat.ltb_lt; auto.
Qed.

(** The index's window of [T] holds every holder meeting [T], and only
    holders. *)
Lemma window_bindex : forall srcs T, window_of srcs (window (bindex srcs) T) T.
Proof.
  intros srcs T. unfold bindex, window. split.
  - intros s H. apply filter_In in H as [H _]. exact (kquery_sub _ _ _ _ H).
  - intros s p Hs HpT Hps. apply filter_In. split.
    + exact (kquery_all _ _ T s p Hs HpT Hps).
    + apply in_nonempty with (p := p). rewrite bmeet_in.
      * rewrite Hps, HpT. reflexivity.
      * rewrite <- (in_boxb_len _ _ Hps). exact (in_boxb_len _ _ HpT).
Qed.

(** [bsched_in] over the index of [srcs]: every guarantee of
    [bsched_correct]. *)
Theorem bsched_in_correct : forall srcs j T, src_dims (length T) srcs ->
  (forall r B p, In (r, B) (bsched_in (bindex srcs) j T) -> in_boxb p B = true ->
     in_boxb p T = true /\ (exists S, In (r, S) srcs /\ in_boxb p S = true)
     /\ (r = j <-> exists S, In (j, S) srcs /\ in_boxb p S = true))
  /\ (forall p, in_boxb p T = true ->
       hits p (map snd (bsched_in (bindex srcs) j T)) = if held_by_any p srcs then 1 else 0).
Proof. intros srcs j T Hs. exact (bsched_window_correct srcs _ j T Hs (window_bindex srcs T)). Qed.
