(** Proofs for [Crossmesh.v]: every element of a target block is received
    exactly once, from a rank whose source block holds it, at the same
    global index; the pieces add up to the target block; the elements taken
    from other ranks are the target block less what the target already
    holds; and on meshes, every target device ends with exactly its block of
    any global array. *)
From Coq Require Import List Arith Lia Bool.
From VS Require Import Prelude Mesh Types Uneven Crossmesh.
Import ListNotations.

(** * Sums *)

Lemma lsum_app : forall A (f : A -> nat) l1 l2, lsum f (l1 ++ l2) = lsum f l1 + lsum f l2.
Proof. intros A f l1. induction l1; simpl; intros; auto. rewrite IHl1. lia. Qed.

Lemma lsum_map : forall A B (f : B -> nat) (g : A -> B) l, lsum f (map g l) = lsum (fun x => f (g x)) l.
Proof. intros. induction l; simpl; auto. Qed.

Lemma lsum_flat_map : forall A B (f : B -> nat) (g : A -> list B) l,
  lsum f (flat_map g l) = lsum (fun x => lsum f (g x)) l.
Proof. intros. induction l; simpl; auto. rewrite lsum_app. congruence. Qed.

Lemma lsum_ext : forall A (f g : A -> nat) l, (forall x, In x l -> f x = g x) -> lsum f l = lsum g l.
Proof.
  intros A f g l. induction l; simpl; intros H; [reflexivity|].
  rewrite (H a) by auto. rewrite IHl by auto. reflexivity.
Qed.

Lemma lsum_filter : forall A (f : A -> nat) (P : A -> bool) l,
  (forall x, P x = false -> f x = 0) -> lsum f (filter P l) = lsum f l.
Proof.
  intros A f P l H. induction l as [|x l IH]; simpl; auto.
  destruct (P x) eqn:E; simpl; rewrite IH; auto. rewrite (H x E). lia.
Qed.

Lemma lsum_mul_l : forall A (f : A -> nat) a l, lsum (fun x => a * f x) l = a * lsum f l.
Proof. intros. induction l; simpl; auto. rewrite IHl. ring. Qed.

Lemma lsum_split : forall A (f : A -> nat) (P : A -> bool) l,
  lsum f l = lsum (fun x => if P x then f x else 0) l + lsum (fun x => if P x then 0 else f x) l.
Proof. intros. induction l as [|x l IH]; simpl; auto. destruct (P x); lia. Qed.

Lemma lsum_pick_seq : forall (f : nat -> nat) a n, a < n ->
  lsum (fun k => if k =? a then f k else 0) (seq 0 n) = f a.
Proof.
  intros f a n. induction n as [|n IH]; intros Ha; [lia|].
  rewrite seq_S, lsum_app. simpl.
  destruct (Nat.eq_dec a n) as [->|Hne].
  - rewrite Nat.eqb_refl.
    assert (lsum (fun k => if k =? n then f k else 0) (seq 0 n) = 0) as ->; [|lia].
    transitivity (lsum (fun _ => 0) (seq 0 n)).
    + apply lsum_ext. intros k Hk. apply in_seq in Hk.
      destruct (k =? n) eqn:E; auto. apply Nat.eqb_eq in E. lia.
    + clear. induction (seq 0 n); simpl; auto.
  - rewrite IH by lia. destruct (n =? a) eqn:E; [apply Nat.eqb_eq in E; lia|lia].
Qed.

Lemma lsum_one_find : forall A (P : A -> bool) l,
  0 < lsum (fun x => if P x then 1 else 0) l -> exists x, find P l = Some x.
Proof.
  intros A P l. induction l as [|x l IH]; simpl; intros H; [lia|].
  destruct (P x); eauto.
Qed.

(** * Cartesian products *)

Fixpoint wt (ws : list (nat * interval -> nat)) (ks : list nat) (B : box) : nat :=
  match ws, ks, B with
  | w :: ws', k :: ks', iv :: B' => w (k, iv) * wt ws' ks' B'
  | [], [], [] => 1
  | _, _, _ => 0
  end.

Fixpoint psums (ws : list (nat * interval -> nat)) (ls : list (list (nat * interval))) : nat :=
  match ws, ls with
  | w :: ws', l :: ls' => lsum w l * psums ws' ls'
  | [], [] => 1
  | _, _ => 0
  end.

Lemma cart_wt : forall ls ws, length ws = length ls ->
  lsum (fun kb => wt ws (fst kb) (snd kb)) (cart ls) = psums ws ls.
Proof.
  induction ls as [|l ls IH]; intros [|w ws] Hl; simpl in *; try discriminate; auto.
  rewrite lsum_flat_map.
  transitivity (lsum (fun kv => w kv * psums ws ls) l).
  - apply lsum_ext. intros [k iv] _. rewrite lsum_map. simpl.
    rewrite lsum_mul_l, IH by lia. reflexivity.
  - induction l as [|kv l IHl]; simpl; auto. rewrite IHl. ring.
Qed.

Fixpoint incart (ls : list (list (nat * interval))) (ks : list nat) (B : box) : Prop :=
  match ls, ks, B with
  | l :: ls', k :: ks', iv :: B' => In (k, iv) l /\ incart ls' ks' B'
  | [], [], [] => True
  | _, _, _ => False
  end.

Lemma in_cart : forall ls kb, In kb (cart ls) -> incart ls (fst kb) (snd kb).
Proof.
  induction ls as [|l ls IH]; simpl; intros kb H.
  - destruct H as [<-|[]]. simpl. auto.
  - apply in_flat_map in H. destruct H as [[k iv] [Hkv H]].
    apply in_map_iff in H. destruct H as [[ks B] [<- H]]. simpl. split; auto.
    apply (IH (ks, B)); auto.
Qed.

Lemma incart_length : forall ls ks B, incart ls ks B -> length ks = length ls /\ length B = length ls.
Proof.
  induction ls as [|l ls IH]; intros [|k ks] [|iv B]; simpl; try tauto.
  intros [_ H]. apply IH in H. lia.
Qed.

(** * One dimension *)

Lemma insideb_isect : forall c k iv x,
  insideb x (isect c k iv) = true <-> k * c <= x < S k * c /\ fst iv <= x < fst iv + snd iv.
Proof.
  intros c k [t L] x. unfold insideb, isect. simpl. rewrite andb_true_iff, Nat.leb_le, Nat.ltb_lt.
  lia.
Qed.

Lemma filter_none : forall A (P : A -> bool) l, (forall x, In x l -> P x = false) -> filter P l = [].
Proof.
  intros A P l H. induction l as [|x l IH]; [reflexivity|]. simpl. rewrite H by (left; auto).
  apply IH. intros y Hy. apply H. right. exact Hy.
Qed.

(** A filter over [seq 0 n] where the test fails below [lo] and from [hi] on
    reads the same off the window [[lo, min n hi)]. *)
Lemma filter_seq_window : forall A (P : A -> bool) (f : nat -> A) lo hi n, lo <= n ->
  (forall k, k < lo -> P (f k) = false) -> (forall k, hi <= k -> P (f k) = false) ->
  filter P (map f (seq 0 n)) = filter P (map f (seq lo (Nat.min n hi - lo))).
Proof.
  intros A P f lo hi n Hlo Hb Ha. set (w := Nat.min n hi - lo).
  replace n with (lo + (w + (n - lo - w))) at 1 by lia.
  rewrite !seq_app, !map_app, !filter_app, Nat.add_0_l.
  rewrite (filter_none _ _ (map f (seq 0 lo))), (filter_none _ _ (map f (seq (lo + w) (n - lo - w)))).
  - rewrite app_nil_r. reflexivity.
  - intros x Hx. apply in_map_iff in Hx. destruct Hx as [k [<- Hk]]. apply in_seq in Hk. apply Ha. lia.
  - intros x Hx. apply in_map_iff in Hx. destruct Hx as [k [<- Hk]]. apply in_seq in Hk. apply Hb. lia.
Qed.

Lemma cells1_window : forall cn iv, cells1 cn iv = cells1_all cn iv.
Proof.
  intros [c n] [t L]. unfold cells1, cells1_all. cbn [fst snd]. symmetry.
  apply filter_seq_window; [lia| |]; intros k Hk; cbn [snd]; apply Nat.ltb_ge; unfold isect; cbn [fst snd].
  - destruct (Nat.eq_dec c 0) as [->|Hc]; [lia|].
    assert (S k * c <= t / c * c) by (apply Nat.mul_le_mono_r; lia).
    pose proof (Nat.mul_div_le t c). lia.
  - destruct (Nat.eq_dec c 0) as [->|Hc]; [lia|].
    assert (S ((t + L) / c) * c <= k * c) by (apply Nat.mul_le_mono_r; lia).
    pose proof (Nat.div_mod (t + L) c Hc). pose proof (Nat.mod_upper_bound (t + L) c Hc). simpl in *. nia.
Qed.

Lemma in_cells1 : forall c n iv k iv',
  In (k, iv') (cells1 (c, n) iv) -> k < n /\ iv' = isect c k iv /\ 0 < snd iv'.
Proof.
  intros c n iv k iv' H. rewrite cells1_window in H. unfold cells1_all in H. apply filter_In in H. destruct H as [H Hp].
  apply in_map_iff in H. destruct H as [k' [Heq Hk]]. injection Heq as <- <-.
  apply in_seq in Hk. simpl in Hp. apply Nat.ltb_lt in Hp. simpl in *. repeat split; auto; lia.
Qed.

Lemma lsum_isect : forall c t L n,
  lsum (fun k => snd (isect c k (t, L))) (seq 0 n) = Nat.min (n * c) (t + L) - Nat.min (n * c) t.
Proof.
  intros c t L n. induction n as [|n IH]; [simpl; lia|].
  rewrite seq_S, lsum_app, IH. unfold isect. simpl. lia.
Qed.

Lemma cells1_vol : forall c n t L, 0 < c -> L = 0 \/ t + L <= n * c ->
  lsum (fun kv => snd (snd kv)) (cells1 (c, n) (t, L)) = L.
Proof.
  intros c n t L Hc Hn. rewrite cells1_window. unfold cells1_all. rewrite lsum_filter.
  - rewrite lsum_map. cbn [fst snd]. rewrite lsum_isect. lia.
  - intros [k iv] E. simpl in *. apply Nat.ltb_ge in E. lia.
Qed.

Lemma div_iff : forall c k x, 0 < c -> (k * c <= x < S k * c <-> k = x / c).
Proof.
  intros c k x Hc. split.
  - intros [H1 H2]. apply Nat.div_unique with (r := x - k * c); simpl in *; lia.
  - intros ->. pose proof (Nat.div_mod x c) as E. pose proof (Nat.mod_upper_bound x c) as U.
    simpl. split; nia.
Qed.

Lemma cells1_pick : forall c n iv (f : interval -> nat) b, b < n ->
  (forall iv', snd iv' = 0 -> f iv' = 0) ->
  lsum (fun kv => if fst kv =? b then f (snd kv) else 0) (cells1 (c, n) iv) = f (isect c b iv).
Proof.
  intros c n iv f b Hb Hf. rewrite cells1_window. unfold cells1_all. rewrite lsum_filter.
  - rewrite lsum_map. cbn [fst snd].
    apply (lsum_pick_seq (fun k => f (isect c k iv)) b n Hb).
  - intros [k iv'] E. simpl in *. apply Nat.ltb_ge in E.
    destruct (k =? b); auto. apply Hf. lia.
Qed.

Lemma cells1_count : forall c n t L x, 0 < c -> t + L <= n * c -> t <= x < t + L ->
  lsum (fun kv => if insideb x (snd kv) then 1 else 0) (cells1 (c, n) (t, L)) = 1.
Proof.
  intros c n t L x Hc Hn Hx.
  assert (Hb : x / c < n) by (apply Nat.div_lt_upper_bound; lia).
  transitivity (lsum (fun kv => if fst kv =? x / c then (fun iv => if insideb x iv then 1 else 0) (snd kv) else 0)
                  (cells1 (c, n) (t, L))).
  - apply lsum_ext. intros [k iv] H. apply in_cells1 in H. destruct H as [_ [-> _]]. simpl.
    destruct (k =? x / c) eqn:E; auto.
    destruct (insideb x (isect c k (t, L))) eqn:F; auto.
    apply insideb_isect in F. apply Nat.eqb_neq in E. exfalso. apply E. apply div_iff; tauto.
  - assert (HP := cells1_pick c n (t, L) (fun iv => if insideb x iv then 1 else 0) (x / c) Hb).
    cbv beta in HP. rewrite HP.
    + destruct (insideb x (isect c (x / c) (t, L))) eqn:F; auto.
      exfalso. apply Bool.not_true_iff_false in F. apply F. apply insideb_isect. simpl.
      split; [apply div_iff; auto|lia].
    + intros [s l] E. simpl in E. subst. unfold insideb. simpl.
      destruct (s <=? x) eqn:E1; destruct (x <? s + 0) eqn:E2; simpl; auto.
      apply Nat.ltb_lt in E2. apply Nat.leb_le in E1. lia.
Qed.

(** * All dimensions *)

Lemma cellsl_length : forall sd T, box_okb sd T = true -> length (cellsl sd T) = length T.
Proof.
  induction sd as [|cn sd IH]; intros [|iv T]; simpl; try discriminate; auto.
  rewrite !andb_true_iff. intros [_ H]. rewrite IH; auto.
Qed.

Lemma wt_vol : forall ks B n, length ks = n -> length B = n ->
  wt (repeat (fun kv : nat * interval => snd (snd kv)) n) ks B = vol B.
Proof.
  induction ks as [|k ks IH]; intros [|iv B] [|n] H1 H2; simpl in *; try discriminate; auto.
  unfold vol in *. simpl. rewrite (IH B n) by lia. unfold prod. simpl. reflexivity.
Qed.

Lemma psums_vol : forall sd T, box_okb sd T = true ->
  psums (repeat (fun kv : nat * interval => snd (snd kv)) (length T)) (cellsl sd T) = vol T.
Proof.
  induction sd as [|[c n] sd IH]; intros [|[t L] T]; simpl; try discriminate; auto.
  rewrite !andb_true_iff, Nat.ltb_lt, orb_true_iff, Nat.eqb_eq, Nat.leb_le. intros [[Hc Hn] H].
  rewrite IH, cells1_vol; auto.
Qed.

(** The pieces' boxes add up to the target box. *)
Lemma cells_vol : forall sd T, box_okb sd T = true ->
  lsum (fun kb => vol (snd kb)) (cells sd T) = vol T.
Proof.
  intros sd T H. unfold cells.
  rewrite <- (psums_vol sd T H), <- cart_wt by (rewrite repeat_length, cellsl_length; auto).
  apply lsum_ext. intros [ks B] Hin. apply in_cart in Hin. apply incart_length in Hin. simpl.
  rewrite cellsl_length in Hin by auto. rewrite wt_vol; tauto.
Qed.

Definition wsp (p : list nat) : list (nat * interval -> nat) :=
  map (fun x => fun kv : nat * interval => if insideb x (snd kv) then 1 else 0) p.

Lemma wt_count : forall p ks B, length ks = length p -> length B = length p ->
  wt (wsp p) ks B = if in_boxb p B then 1 else 0.
Proof.
  induction p as [|x p IH]; intros [|k ks] [|iv B] H1 H2; simpl in *; try discriminate; auto.
  rewrite IH by lia. destruct (insideb x iv), (in_boxb p B); auto.
Qed.

Lemma in_boxb_length : forall p B, in_boxb p B = true -> length p = length B.
Proof.
  induction p; intros [|iv B]; simpl; try discriminate; auto.
  rewrite andb_true_iff. intros [_ H]. rewrite (IHp B H). auto.
Qed.

Lemma psums_count : forall sd T p, box_okb sd T = true -> in_boxb p T = true ->
  psums (wsp p) (cellsl sd T) = 1.
Proof.
  induction sd as [|[c n] sd IH]; intros [|[t L] T] [|x p]; simpl; try discriminate; auto.
  intros H0 H1. apply andb_true_iff in H0. destruct H0 as [H0 H].
  apply andb_true_iff in H0. destruct H0 as [Hc Hn]. apply Nat.ltb_lt in Hc.
  apply orb_true_iff in Hn. rewrite Nat.eqb_eq, Nat.leb_le in Hn.
  apply andb_true_iff in H1. destruct H1 as [Hx Hp]. unfold insideb in Hx. simpl in Hx.
  apply andb_true_iff in Hx. destruct Hx as [Hx1 Hx2]. apply Nat.leb_le in Hx1. apply Nat.ltb_lt in Hx2.
  simpl in *. rewrite IH, cells1_count; auto. lia.
Qed.

(** Every element of the target box lies in exactly one piece. *)
Lemma cells_count : forall sd T p, box_okb sd T = true -> in_boxb p T = true ->
  lsum (fun kb => if in_boxb p (snd kb) then 1 else 0) (cells sd T) = 1.
Proof.
  intros sd T p H Hp. unfold cells.
  transitivity (lsum (fun kb => wt (wsp p) (fst kb) (snd kb)) (cart (cellsl sd T))).
  - apply lsum_ext. intros [ks B] Hin. apply in_cart in Hin. apply incart_length in Hin. simpl.
    apply in_boxb_length in Hp. rewrite cellsl_length in Hin by auto. destruct Hin as [Hk HB].
    simpl in Hk, HB. rewrite wt_count by lia. reflexivity.
  - rewrite cart_wt. apply psums_count; auto.
    unfold wsp. rewrite map_length, cellsl_length by auto. apply in_boxb_length; auto.
Qed.

Definition wsb (b : list nat) : list (nat * interval -> nat) :=
  map (fun k0 => fun kv : nat * interval => if fst kv =? k0 then snd (snd kv) else 0) b.

Lemma nat_list_eqb_cons : forall a l b l', nat_list_eqb (a :: l) (b :: l') = (a =? b) && nat_list_eqb l l'.
Proof.
  intros. destruct (nat_list_eqb (a :: l) (b :: l')) eqn:E.
  - apply nat_list_eqb_spec in E. injection E as -> ->.
    rewrite Nat.eqb_refl. symmetry. apply nat_list_eqb_spec. auto.
  - symmetry. apply Bool.not_true_iff_false. rewrite andb_true_iff, Nat.eqb_eq, nat_list_eqb_spec.
    intros [-> ->]. apply Bool.not_true_iff_false in E. apply E, nat_list_eqb_spec. auto.
Qed.

Lemma wt_own : forall b ks B, length ks = length b -> length B = length b ->
  wt (wsb b) ks B = if nat_list_eqb ks b then vol B else 0.
Proof.
  induction b as [|k0 b IH]; intros [|k ks] [|iv B] H1 H2; simpl in *; try discriminate; auto.
  rewrite IH by lia. rewrite nat_list_eqb_cons. unfold vol. simpl. unfold prod. simpl.
  destruct (k =? k0), (nat_list_eqb ks b); simpl; lia.
Qed.

Lemma cell_okb_length : forall sd b, cell_okb sd b = true -> length b = length sd.
Proof.
  induction sd; intros [|k b]; simpl; try discriminate; auto.
  rewrite andb_true_iff. intros [_ H]. rewrite (IHsd b H); auto.
Qed.

Lemma box_okb_length : forall sd T, box_okb sd T = true -> length T = length sd.
Proof.
  induction sd; intros [|iv T]; simpl; try discriminate; auto.
  rewrite !andb_true_iff. intros [_ H]. rewrite (IHsd T H); auto.
Qed.

Lemma psums_own : forall sd T b, box_okb sd T = true -> cell_okb sd b = true ->
  psums (wsb b) (cellsl sd T) = vol (owned sd b T).
Proof.
  induction sd as [|[c n] sd IH]; intros [|[t L] T] [|k b]; simpl; try discriminate; auto.
  rewrite !andb_true_iff, !Nat.ltb_lt. intros [[Hc Hn] H] [Hk Hb].
  rewrite IH by auto. rewrite (cells1_pick c n (t, L) snd k Hk) by auto.
  unfold vol, prod. simpl. reflexivity.
Qed.

(** The pieces in cell [b] make up the part of the box inside [b]. *)
Lemma cells_own : forall sd T b, box_okb sd T = true -> cell_okb sd b = true ->
  lsum (fun kb => if nat_list_eqb (fst kb) b then vol (snd kb) else 0) (cells sd T) = vol (owned sd b T).
Proof.
  intros sd T b H Hb. unfold cells.
  transitivity (lsum (fun kb => wt (wsb b) (fst kb) (snd kb)) (cart (cellsl sd T))).
  - apply lsum_ext. intros [ks B] Hin. apply in_cart in Hin. apply incart_length in Hin. simpl.
    pose proof (cell_okb_length _ _ Hb) as Hlb. rewrite cellsl_length in Hin by auto.
    pose proof (box_okb_length _ _ H) as HlT. destruct Hin as [Hk HB]. simpl in Hk, HB.
    rewrite wt_own by lia. reflexivity.
  - rewrite cart_wt. apply psums_own; auto.
    unfold wsb. rewrite map_length, cellsl_length by auto.
    rewrite (cell_okb_length _ _ Hb). symmetry. apply box_okb_length; auto.
Qed.

(** A piece lies in the target box and in its cell. *)
Lemma incart_inside : forall sd T ks B p, box_okb sd T = true -> incart (cellsl sd T) ks B ->
  in_boxb p B = true -> in_boxb p T = true /\ in_boxb p (cellbox sd ks) = true.
Proof.
  induction sd as [|[c n] sd IH]; intros [|iv T] [|k ks] [|ivb B] [|x p]; simpl; try tauto;
    try discriminate.
  intros Hok [Hin Hc] Hp. apply andb_true_iff in Hp. destruct Hp as [Hx Hp].
  apply andb_true_iff in Hok. destruct Hok as [_ Hok].
  apply in_cells1 in Hin. destruct Hin as [_ [-> _]].
  apply insideb_isect in Hx. destruct (IH T ks B p Hok Hc Hp) as [H1 H2].
  rewrite H1, H2. unfold insideb. simpl. rewrite !andb_true_r, !andb_true_iff, !Nat.leb_le, !Nat.ltb_lt.
  simpl in Hx. lia.
Qed.

Lemma shift_unshift : forall B p, in_boxb p B = true -> shift B (unshift B p) = p.
Proof.
  induction B as [|iv B IH]; intros [|x p]; simpl; try discriminate; auto.
  rewrite andb_true_iff. unfold insideb. rewrite andb_true_iff, Nat.leb_le. intros [[H _] Hp].
  rewrite IH by auto. f_equal. lia.
Qed.

(** * Senders *)

Lemma in_holders : forall SR ks r, In r (holders SR ks) -> In (r, ks) SR.
Proof.
  intros SR ks r H. unfold holders in H. apply in_map_iff in H. destruct H as [[r' b] [<- H]].
  apply filter_In in H. destruct H as [H E]. simpl in *. apply nat_list_eqb_spec in E. subst. auto.
Qed.

Lemma pick_in : forall SR self j ks r, pick SR self j ks = Some r -> In (r, ks) SR.
Proof.
  unfold pick, pick_from. intros SR self j ks r H. destruct (memb self (holders SR ks)) eqn:E.
  - injection H as <-. apply memb_spec in E. apply in_holders; auto.
  - apply nth_error_In in H. apply in_holders; auto.
Qed.

Lemma pick_self : forall SR self j ks, In (self, ks) SR -> pick SR self j ks = Some self.
Proof.
  intros SR self j ks H. unfold pick, pick_from.
  assert (Hm : memb self (holders SR ks) = true).
  { apply memb_spec. unfold holders. apply in_map_iff. exists (self, ks). split; auto.
    apply filter_In. split; auto. simpl. apply nat_list_eqb_spec. auto. }
  rewrite Hm. auto.
Qed.

Lemma nodup_fst : forall (l : list src) a b b', NoDup (map fst l) -> In (a, b) l -> In (a, b') l -> b = b'.
Proof.
  induction l as [|[x bx] l IH]; simpl; intros a b b' Hnd H1 H2; [contradiction|].
  inversion Hnd as [|? ? Hni Hnd']; subst.
  destruct H1 as [E1|H1]; destruct H2 as [E2|H2].
  - congruence.
  - injection E1 as -> ->. exfalso. apply Hni. apply in_map_iff. exists (a, b'). auto.
  - injection E2 as -> ->. exfalso. apply Hni. apply in_map_iff. exists (a, b). auto.
  - eauto.
Qed.

Lemma pick_all_spec : forall SR self j cl ps, pick_all SR self j cl = Some ps ->
  map (fun q => (pcell q, pbox q)) ps = cl /\
  forall q, In q ps -> pick SR self j (pcell q) = Some (psrc q).
Proof.
  induction cl as [|[ks B] cl IH]; simpl; intros ps H.
  - injection H as <-. simpl. split; auto. tauto.
  - destruct (pick SR self j ks) as [r|] eqn:E1; [|discriminate].
    destruct (pick_all SR self j cl) as [ps'|] eqn:E2; [|discriminate].
    injection H as <-. destruct (IH ps' eq_refl) as [H1 H2]. simpl. rewrite H1. split; auto.
    intros q [<-|Hq]; simpl; auto.
Qed.

(** * One target *)

Lemma sched1_ok : forall sd SR j self T ps, sched1 sd SR j (self, T) = Some ps -> box_okb sd T = true.
Proof. intros sd SR j self T ps Hs. unfold sched1 in Hs. simpl in Hs. destruct (box_okb sd T); auto; discriminate. Qed.

Lemma sched1_pa : forall sd SR j self T ps, sched1 sd SR j (self, T) = Some ps ->
  pick_all SR self j (cells sd T) = Some ps.
Proof.
  intros sd SR j self T ps Hs. pose proof (sched1_ok _ _ _ _ _ _ Hs) as Hok.
  unfold sched1 in Hs. simpl in Hs. rewrite Hok in Hs. auto.
Qed.

Lemma lsum_pieces : forall sd SR j self T ps, sched1 sd SR j (self, T) = Some ps ->
  forall (f : list nat * box -> nat), lsum (fun q => f (pcell q, pbox q)) ps = lsum f (cells sd T).
Proof.
  intros sd SR j self T ps Hs f. pose proof (sched1_pa _ _ _ _ _ _ Hs) as Hpa.
  destruct (pick_all_spec _ _ _ _ _ Hpa) as [H _]. rewrite <- H, lsum_map. reflexivity.
Qed.

Lemma piece_incart : forall sd SR j self T ps, sched1 sd SR j (self, T) = Some ps ->
  forall q, In q ps -> incart (cellsl sd T) (pcell q) (pbox q).
Proof.
  intros sd SR j self T ps Hs q Hq. pose proof (sched1_pa _ _ _ _ _ _ Hs) as Hpa.
  destruct (pick_all_spec _ _ _ _ _ Hpa) as [H _].
  apply (in_cart _ (pcell q, pbox q)). fold (cells sd T). rewrite <- H.
  apply in_map_iff. exists q. auto.
Qed.

Lemma sched1_cover : forall sd SR j self T ps, sched1 sd SR j (self, T) = Some ps ->
  forall p, in_boxb p T = true -> lsum (fun q => if in_boxb p (pbox q) then 1 else 0) ps = 1.
Proof.
  intros sd SR j self T ps Hs p Hp.
  pose proof (lsum_pieces _ _ _ _ _ _ Hs (fun kb => if in_boxb p (snd kb) then 1 else 0)) as E.
  cbn [fst snd] in E. rewrite E.
  apply cells_count; auto. eapply sched1_ok; eauto.
Qed.

Lemma sched1_sound : forall sd SR j self T ps, sched1 sd SR j (self, T) = Some ps ->
  forall q, In q ps ->
  In (psrc q, pcell q) SR /\
  forall p, in_boxb p (pbox q) = true -> in_boxb p T = true /\ in_boxb p (cellbox sd (pcell q)) = true.
Proof.
  intros sd SR j self T ps Hs q Hq. pose proof (sched1_pa _ _ _ _ _ _ Hs) as Hpa.
  destruct (pick_all_spec _ _ _ _ _ Hpa) as [_ H]. split.
  - eapply pick_in. apply H; auto.
  - intros p Hp. apply incart_inside with (B := pbox q); auto.
    + eapply sched1_ok; eauto.
    + eapply piece_incart; eauto.
Qed.

Lemma sched1_volume : forall sd SR j self T ps, sched1 sd SR j (self, T) = Some ps ->
  lsum (fun q => vol (pbox q)) ps = vol T.
Proof.
  intros sd SR j self T ps Hs. pose proof (lsum_pieces _ _ _ _ _ _ Hs (fun kb => vol (snd kb))) as E.
  cbn [fst snd] in E. rewrite E.
  apply cells_vol; auto. eapply sched1_ok; eauto.
Qed.

Lemma sched1_traffic : forall sd SR j self T ps, sched1 sd SR j (self, T) = Some ps ->
  NoDup (map fst SR) -> (forall s, In s SR -> cell_okb sd (snd s) = true) ->
  traffic self ps = vol T - held sd SR self T.
Proof.
  intros sd SR j self T ps Hs Hnd Hcell. pose proof (sched1_pa _ _ _ _ _ _ Hs) as Hpa.
  pose proof (sched1_ok _ _ _ _ _ _ Hs) as Hok.
  destruct (pick_all_spec _ _ _ _ _ Hpa) as [_ Hpk]. unfold traffic, held.
  destruct (find (fun s => fst s =? self) SR) as [[r b]|] eqn:E.
  - apply find_some in E. destruct E as [Hin E]. simpl in E. apply Nat.eqb_eq in E. subst r.
    transitivity (lsum (fun q => (fun kb => if nat_list_eqb (fst kb) b then 0 else vol (snd kb))
                                   (pcell q, pbox q)) ps).
    + apply lsum_ext. intros q Hq. cbn [fst snd].
      destruct (psrc q =? self) eqn:E1; destruct (nat_list_eqb (pcell q) b) eqn:E2; auto.
      * exfalso. apply Nat.eqb_eq in E1. apply Bool.not_true_iff_false in E2. apply E2.
        apply nat_list_eqb_spec. eapply nodup_fst; eauto.
        rewrite <- E1. eapply pick_in; eauto.
      * exfalso. apply Nat.eqb_neq in E1. apply nat_list_eqb_spec in E2. apply E1.
        assert (pick SR self j (pcell q) = Some self) by (rewrite E2; apply pick_self; auto).
        rewrite (Hpk q Hq) in H. congruence.
    + rewrite (lsum_pieces _ _ _ _ _ _ Hs (fun kb => if nat_list_eqb (fst kb) b then 0 else vol (snd kb))).
      rewrite <- cells_vol with (sd := sd) by auto.
      rewrite (lsum_split _ (fun kb => vol (snd kb)) (fun kb => nat_list_eqb (fst kb) b) (cells sd T)).
      cbn [snd]. rewrite cells_own by (auto; apply (Hcell (self, b)); auto). lia.
  - transitivity (lsum (fun q => vol (pbox q)) ps).
    + apply lsum_ext. intros q Hq. destruct (psrc q =? self) eqn:E1; auto.
      apply Nat.eqb_eq in E1. exfalso.
      assert (Hi : In (psrc q, pcell q) SR) by (eapply pick_in; eauto).
      apply (find_none _ _ E) in Hi. simpl in Hi. rewrite E1, Nat.eqb_refl in Hi. discriminate.
    + rewrite (sched1_volume _ _ _ _ _ _ Hs). lia.
Qed.

Lemma sched1_assemble : forall sd SR j self T ps, sched1 sd SR j (self, T) = Some ps ->
  forall V (A : list nat -> V) L, is_source A sd SR L ->
  forall i, in_boxb (shift T i) T = true -> assemble L sd T ps i = Some (A (shift T i)).
Proof.
  intros sd SR j self T ps Hs V A L HL i Hi. unfold assemble.
  assert (Hc := sched1_cover _ _ _ _ _ _ Hs _ Hi).
  destruct (lsum_one_find _ (fun q => in_boxb (shift T i) (pbox q)) ps) as [q Hq]; [lia|].
  rewrite Hq. apply find_some in Hq. destruct Hq as [Hq Hp].
  destruct (sched1_sound _ _ _ _ _ _ Hs q Hq) as [Hin Hb]. destruct (Hb _ Hp) as [_ Hcb].
  rewrite (HL _ _ Hin). rewrite shift_unshift; auto.
Qed.

(** * The holders table *)

(** The sources of key [k] in the table are those of [SR] whose cell has key [k], in order. *)
Lemma bucket_table : forall sd SR k, find_or [] k (holder_table sd SR) = filter (fun s => ckey sd (snd s) =? k) SR.
Proof.
  intros sd SR k. induction SR as [|s SR IH]; [reflexivity|].
  change (holder_table sd (s :: SR)) with
    (NatMap.add (ckey sd (snd s)) (s :: find_or [] (ckey sd (snd s)) (holder_table sd SR)) (holder_table sd SR)).
  cbn [filter]. rewrite find_or_add.
  destruct (Nat.eqb_spec (ckey sd (snd s)) k) as [<-|E]; rewrite IH; reflexivity.
Qed.

Lemma holders_table : forall sd SR ks, holders (find_or [] (ckey sd ks) (holder_table sd SR)) ks = holders SR ks.
Proof.
  intros sd SR ks. rewrite bucket_table. unfold holders. f_equal.
  induction SR as [|s SR IH]; [reflexivity|]. cbn [filter].
  destruct (nat_list_eqb (snd s) ks) eqn:Ee.
  - assert (Ek : (ckey sd (snd s) =? ckey sd ks) = true)
      by (apply nat_list_eqb_spec in Ee; rewrite Ee; apply Nat.eqb_refl).
    rewrite Ek. cbn [filter]. rewrite Ee, IH. reflexivity.
  - destruct (ckey sd (snd s) =? ckey sd ks); cbn [filter]; [rewrite Ee|]; exact IH.
Qed.

Lemma pick_all_in_eq : forall sd SR self j cl,
  pick_all_in sd (holder_table sd SR) self j cl = pick_all SR self j cl.
Proof.
  intros sd SR self j cl. induction cl as [|kb cl IH]; [reflexivity|]. cbn [pick_all_in pick_all].
  rewrite holders_table, IH. reflexivity.
Qed.

(** [sched_in] over the table of [SR] is [sched_from] over [SR]. *)
Lemma sched_in_eq : forall sd SR tgs j, sched_in sd (holder_table sd SR) j tgs = sched_from sd SR j tgs.
Proof.
  intros sd SR tgs. induction tgs as [|tg tgs IH]; intros j; [reflexivity|]. cbn [sched_in sched_from].
  rewrite IH. unfold sched1. destruct (box_okb sd (snd tg)); [rewrite pick_all_in_eq|]; reflexivity.
Qed.

(** * All targets *)

Lemma sched_from_nth : forall sd SR tgs j0 pss, sched_from sd SR j0 tgs = Some pss ->
  length pss = length tgs /\
  forall j tg, nth_error tgs j = Some tg -> exists ps, nth_error pss j = Some ps /\ sched1 sd SR (j0 + j) tg = Some ps.
Proof.
  induction tgs as [|tg tgs IH]; simpl; intros j0 pss H.
  - injection H as <-. split; auto. intros [|j] tg' E; simpl in E; discriminate.
  - destruct (sched1 sd SR j0 tg) as [ps|] eqn:E1; [|discriminate].
    destruct (sched_from sd SR (S j0) tgs) as [pss'|] eqn:E2; [|discriminate].
    injection H as <-. destruct (IH _ _ E2) as [Hl Hn]. simpl. split; [lia|].
    intros [|j] tg' E; simpl in E.
    + injection E as <-. exists ps. rewrite Nat.add_0_r. auto.
    + destruct (Hn j tg' E) as [ps' [H1 H2]]. exists ps'. rewrite Nat.add_succ_r. auto.
Qed.

Lemma xsched_spec : forall sd SR tgs pss, xsched sd SR tgs = Some pss ->
  NoDup (map fst SR) /\ (forall s, In s SR -> cell_okb sd (snd s) = true) /\
  length pss = length tgs /\
  forall j tg, nth_error tgs j = Some tg -> exists ps, nth_error pss j = Some ps /\ sched1 sd SR j tg = Some ps.
Proof.
  intros sd SR tgs pss H. unfold xsched in H. rewrite sched_in_eq in H.
  destruct (nodup_fast (map fst SR) && forallb (fun s => cell_okb sd (snd s)) SR) eqn:E; [|discriminate].
  apply andb_true_iff in E. destruct E as [E1 E2]. apply nodup_fast_spec in E1.
  rewrite forallb_forall in E2. destruct (sched_from_nth _ _ _ _ _ H) as [Hl Hn].
  repeat split; auto.
Qed.

(** The schedule of every target: each element of its box in exactly one
    piece; each piece inside the box and inside the cell of its sender, a
    source rank holding that cell; the pieces add up to the box; what comes
    from other ranks is the box less what the target holds. *)
Theorem xsched_correct : forall sd SR tgs pss, xsched sd SR tgs = Some pss ->
  length pss = length tgs /\
  forall j self T, nth_error tgs j = Some (self, T) ->
  exists ps, nth_error pss j = Some ps /\
    (forall p, in_boxb p T = true -> lsum (fun q => if in_boxb p (pbox q) then 1 else 0) ps = 1) /\
    (forall q, In q ps -> In (psrc q, pcell q) SR /\
       forall p, in_boxb p (pbox q) = true -> in_boxb p T = true /\ in_boxb p (cellbox sd (pcell q)) = true) /\
    lsum (fun q => vol (pbox q)) ps = vol T /\
    traffic self ps = vol T - held sd SR self T.
Proof.
  intros sd SR tgs pss H. destruct (xsched_spec _ _ _ _ H) as [Hnd [Hc [Hl Hn]]]. split; auto.
  intros j self T E. destruct (Hn j _ E) as [ps [H1 H2]]. exists ps. split; auto.
  split; [|split; [|split]].
  - eapply sched1_cover; eauto.
  - eapply sched1_sound; eauto.
  - eapply sched1_volume; eauto.
  - eapply sched1_traffic; eauto.
Qed.

(** Data level: with the source ranks holding their blocks of a global array,
    every target assembles exactly its block. *)
Theorem xsched_assemble : forall sd SR tgs pss, xsched sd SR tgs = Some pss ->
  forall j self T ps, nth_error tgs j = Some (self, T) -> nth_error pss j = Some ps ->
  forall V (A : list nat -> V) L, is_source A sd SR L ->
  forall i, in_boxb (shift T i) T = true -> assemble L sd T ps i = Some (A (shift T i)).
Proof.
  intros sd SR tgs pss H j self T ps E1 E2 V A L HL i Hi.
  destruct (xsched_spec _ _ _ _ H) as [_ [_ [_ Hn]]]. destruct (Hn j _ E1) as [ps' [H1 H2]].
  rewrite E2 in H1. injection H1 as <-.
  eapply sched1_assemble; eauto.
Qed.

(** * On meshes *)

Lemma shift_cellbox : forall m t c i,
  shift (cellbox (sdims m t) (blocks m t c)) i = ugindex m t c i.
Proof.
  induction t as [|D t IH]; intros c [|x i]; simpl; auto.
  unfold ugindex in *. simpl. rewrite IH. unfold ugidx. reflexivity.
Qed.

Lemma shift_tbox : forall m t c i, shift (tbox m t c) i = ugindex m t c i.
Proof.
  induction t as [|D t IH]; intros c [|x i]; simpl; auto.
  unfold ugindex in *. simpl. rewrite IH. unfold ugidx. f_equal. lia.
Qed.

Lemma tbox_valid : forall m t c i, uvalid_pos m t c i -> in_boxb (shift (tbox m t c) i) (tbox m t c) = true.
Proof.
  intros m t c i H. unfold uvalid_pos in H. induction H as [|D x t i Hx H IH]; simpl; auto.
  rewrite IH, andb_true_r. unfold insideb. simpl. rewrite andb_true_iff, Nat.leb_le, Nat.ltb_lt. lia.
Qed.

Lemma srcs_nth : forall m r t,
  srcs m r t = map (fun i => (nth i r 0, blocks m t (coords_of_rank m i))) (seq 0 (ndevices m)).
Proof. intros. unfold srcs. apply map_along_nth. Qed.

Lemma tgts_nth_map : forall m r t,
  tgts m r t = map (fun j => (nth j r 0, tbox m t (coords_of_rank m j))) (seq 0 (ndevices m)).
Proof. intros. unfold tgts. apply map_along_nth. Qed.

Lemma in_srcs : forall m r t s, In s (srcs m r t) ->
  exists i, i < ndevices m /\ s = (nth i r 0, blocks m t (coords_of_rank m i)).
Proof.
  intros m r t s H. rewrite srcs_nth in H. apply in_map_iff in H. destruct H as [i [<- H]].
  apply in_seq in H. exists i. split; auto. lia.
Qed.

(** What a cross-mesh schedule [pss] guarantees (the conclusion of
    [xplan_correct], [Balanceproof.xplan_bal_correct] and
    [Perrankproof.wplan_correct]): one entry per target device; every
    target assembles exactly its block of any global array; every element
    of its block arrives in exactly one piece, from a source rank whose
    block holds it; the pieces add up to its block; it receives from other
    ranks its block less what it already holds. *)
Definition xschedule_ok (m1 : mesh) (r1 : list nat) (t1 : atype) (m2 : mesh) (r2 : list nat) (t2 : atype)
    (pss : list (list piece)) : Prop :=
  length pss = ndevices m2 /\
  forall j, j < ndevices m2 ->
  exists ps, nth_error pss j = Some ps /\
    (forall V (A : list nat -> V) (L : nat -> list nat -> V),
       (forall i, i < ndevices m1 -> forall k, L (nth i r1 0) k = A (ugindex m1 t1 (coords_of_rank m1 i) k)) ->
       forall i, uvalid_pos m2 t2 (coords_of_rank m2 j) i ->
       assemble L (sdims m1 t1) (tbox m2 t2 (coords_of_rank m2 j)) ps i
         = Some (A (ugindex m2 t2 (coords_of_rank m2 j) i))) /\
    (forall p, in_boxb p (tbox m2 t2 (coords_of_rank m2 j)) = true ->
       lsum (fun q => if in_boxb p (pbox q) then 1 else 0) ps = 1) /\
    (forall q, In q ps -> In (psrc q, pcell q) (srcs m1 r1 t1) /\
       forall p, in_boxb p (pbox q) = true ->
         in_boxb p (tbox m2 t2 (coords_of_rank m2 j)) = true /\
         in_boxb p (cellbox (sdims m1 t1) (pcell q)) = true) /\
    lsum (fun q => vol (pbox q)) ps = vol (tbox m2 t2 (coords_of_rank m2 j)) /\
    traffic (nth j r2 0) ps = vol (tbox m2 t2 (coords_of_rank m2 j))
      - held (sdims m1 t1) (srcs m1 r1 t1) (nth j r2 0) (tbox m2 t2 (coords_of_rank m2 j)).

(** **End to end**: when [xplan] returns a schedule, it has one entry per
    target device; and for every global array, every target device
    assembling what its schedule sends it, from source devices holding their
    blocks of that array, gets at every valid position of its block the
    array's element at that position's global index. Every element of its
    block arrives in exactly one piece, each piece from a source rank whose
    block holds it, the pieces add up to its block, and the elements taken
    from other ranks are its block less what it already holds. *)
Theorem xplan_correct : forall m1 r1 t1 m2 r2 t2 pss,
  xplan m1 r1 t1 m2 r2 t2 = Some pss ->
  xschedule_ok m1 r1 t1 m2 r2 t2 pss.
Proof.
  unfold xschedule_ok.
  intros m1 r1 t1 m2 r2 t2 pss H. unfold xplan in H.
  match type of H with (if ?b then _ else _) = _ => destruct b; [|discriminate] end.
  destruct (xsched_correct _ _ _ _ H) as [Hl Hn].
  assert (Hlen : length (tgts m2 r2 t2) = ndevices m2) by (rewrite tgts_nth_map, map_length, seq_length; auto).
  split; [lia|]. intros j Hj.
  assert (E : nth_error (tgts m2 r2 t2) j = Some (nth j r2 0, tbox m2 t2 (coords_of_rank m2 j))).
  { rewrite tgts_nth_map, nth_error_map, nth_error_seq0 by auto. reflexivity. }
  destruct (Hn _ _ _ E) as [ps [H1 [H2 [H3 [H4 H5]]]]]. exists ps. split; auto.
  split; [|split; [|split; [|split]]]; auto.
  intros V A L HL i Hi.
  rewrite (xsched_assemble _ _ _ _ H j _ _ ps E H1 V A L).
  - rewrite shift_tbox. auto.
  - intros r b Hin k. apply in_srcs in Hin. destruct Hin as [i' [Hi' Es]]. injection Es as -> ->.
    rewrite HL by auto. rewrite shift_cellbox. auto.
  - apply tbox_valid; auto.
Qed.

(** A position inside a target block (of any mesh) and inside a source
    cell lies in the valid part of that source block: reading it never
    reads the source's padding. *)
Lemma cell_read_uvalid : forall m t m' t' c c' p, map gsize t = map gsize t' ->
  in_boxb p (tbox m' t' c) = true -> in_boxb p (cellbox (sdims m t) (blocks m t c')) = true ->
  uvalid_pos m t c' (unshift (cellbox (sdims m t) (blocks m t c')) p).
Proof.
  intros m t m' t' c c' p Hg. revert t' Hg p.
  induction t as [|D t IH]; intros [|D' t'] Hg [|x p] H1 H2; simpl in *; try discriminate;
    try (constructor; fail).
  injection Hg as Hg1 Hg2.
  apply andb_true_iff in H1 as [H1 H1']. apply andb_true_iff in H2 as [H2 H2'].
  constructor; [|eapply IH; eauto].
  unfold insideb in H1, H2. simpl in H1, H2. rewrite !andb_true_iff, !Nat.leb_le, !Nat.ltb_lt in H1, H2.
  unfold uvlen, uvalid, ugidx, ucsize in *. rewrite Hg1 in *.
  assert (x < gsize D').
  { destruct (Nat.le_gt_cases (block m' D' c * csize (gsize D') (nprod m' (axes D')))
                              (Nat.min (gsize D') (S (block m' D' c) * csize (gsize D') (nprod m' (axes D'))))); lia. }
  lia.
Qed.

(** **End to end, on valid positions**: whatever the source buffers hold
    at their padding, if every valid position of every source device's
    block holds the array's element there, every target device assembles
    at every valid position of its block the array's element: the schedule
    reads valid source positions only. (The form of
    [Exchangeproof.uexchange_correct], for two meshes and rank lists;
    [xplan_correct] assumes every position of a source buffer holds it.) *)
Theorem xplan_correct_valid : forall m1 r1 t1 m2 r2 t2 pss,
  xplan m1 r1 t1 m2 r2 t2 = Some pss ->
  forall V (A : list nat -> V) (L : nat -> list nat -> V),
  (forall i k, i < ndevices m1 -> uvalid_pos m1 t1 (coords_of_rank m1 i) k ->
     L (nth i r1 0) k = A (ugindex m1 t1 (coords_of_rank m1 i) k)) ->
  forall j i, j < ndevices m2 -> uvalid_pos m2 t2 (coords_of_rank m2 j) i ->
  assemble L (sdims m1 t1) (tbox m2 t2 (coords_of_rank m2 j)) (nth j pss []) i
    = Some (A (ugindex m2 t2 (coords_of_rank m2 j) i)).
Proof.
  intros m1 r1 t1 m2 r2 t2 pss H V A L HL j i Hj Hi.
  assert (Hg : map gsize t1 = map gsize t2).
  { unfold xplan in H.
    destruct (nat_list_eqb (map gsize t1) (map gsize t2)) eqn:E.
    - apply nat_list_eqb_spec; exact E.
    - rewrite !andb_false_r in H. discriminate. }
  destruct (xplan_correct _ _ _ _ _ _ _ H) as [_ Hn]. destruct (Hn j Hj) as [ps [E [_ [Hcov [Hsrc _]]]]].
  rewrite (nth_error_nth _ _ [] E).
  pose proof (tbox_valid _ _ _ _ Hi) as Hin.
  destruct (lsum_one_find _ (fun q => in_boxb (shift (tbox m2 t2 (coords_of_rank m2 j)) i) (pbox q)) ps)
    as [q Ef]; [rewrite Hcov by exact Hin; lia|].
  unfold assemble. rewrite Ef. apply find_some in Ef as [Hq Hp].
  destruct (Hsrc q Hq) as [Hs Hbox]. destruct (Hbox _ Hp) as [HT HC].
  apply in_srcs in Hs. destruct Hs as [i' [Hi' Es]].
  destruct q as [qs qc qb]. simpl in *. injection Es as -> ->.
  f_equal. rewrite HL by (auto; eapply cell_read_uvalid; eauto).
  rewrite <- shift_cellbox, shift_unshift by exact HC. rewrite shift_tbox. reflexivity.
Qed.
